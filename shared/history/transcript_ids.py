"""The idempotency ids of a long transcript, kept out of the wake's path (docs/architecture.md "How a
session wakes"): `.transcript.ids` beside the transcript holds every prompt id, injection source and
compaction request id of the lines before its `length`, as fixed-width records sorted by a hash of
the id, each with the entry that recorded it. The transcript index keeps only the ids folded after
the file's `length` (at most `RECENT_MAX`, shared/history/transcript_index.py); a look-up reads the index's
ids in memory, then this file: a few 4 KiB reads by interpolation (the keys are uniform hashes), no
id of it held in memory and none read at a wake.

Layout: a header (magic, record count, the transcript prefix described: its length, last line's span
and hash, then the length of the strings region), the records (`KEY` bytes of BLAKE2b over the kind
and the id's parts, then the entry id: inline when shorter than `VALUE` bytes, else a pointer into the
strings region after the records), the strings. Each write is a whole new file (temp file, fsync,
rename, fsync the directory): a reader sees the old file or the new one. A merge copies the old
records around the new ones in slices, never holding the file. Every function is blocking: the wake
and the merges run in the I/O pool; a look-up reads a few KiB (shared/history/transcript_index.py `Known`).
"""

from __future__ import annotations

import bisect
import hashlib
import os
import struct
import tempfile
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Literal, Protocol, TypeVar

from shared.history.transcript_scan import Span, file_size, read_spans
from shared.storage.leftovers import discard_temp

MAGIC = b"GMIDS\x00\x00\x01"
HEADER = struct.Struct("<8sQQQQ32sQ")  # magic, count, length, last offset, last length, last sha256, strings
KEY, VALUE = 12, 20  # 96-bit keys: a false match among a million ids has odds of about 1e-17
RECORD = KEY + VALUE
BLOCK = 128  # records read at once (4 KiB)
SLICE = 1 << 20  # bytes copied at once by a merge
OVERFLOW = 255
POINTER = struct.Struct("<QI")
K = TypeVar("K", bound=Hashable)


def ids_path(transcript: Path) -> Path:
    return transcript.with_name(".transcript.ids")


def key(kind: str, *parts: str) -> bytes:
    """The record key of an id: `p` a prompt id, `s` (source, source id), `c` a compaction request id."""
    h = hashlib.blake2b(kind.encode(), digest_size=KEY)
    for part in parts:
        raw = part.encode("utf-8", "surrogatepass")
        h.update(len(raw).to_bytes(8, "little"))  # length-prefixed: ("a", "b:c") never meets ("a:b", "c")
        h.update(raw)
    return h.digest()


@dataclass(frozen=True)
class Header:
    count: int
    length: int  # bytes of the transcript whose ids the file holds (whole lines)
    last: Span
    last_hash: bytes
    strings: int

    @property
    def strings_at(self) -> int:
        return HEADER.size + self.count * RECORD

    def pack(self) -> bytes:
        return HEADER.pack(MAGIC, self.count, self.length, *self.last, self.last_hash, self.strings)


def _header(fd: int) -> Header:
    raw = os.pread(fd, HEADER.size, 0)
    if len(raw) != HEADER.size:
        raise ValueError("ids file: short header")
    magic, count, length, off, n, digest, strings = HEADER.unpack(raw)
    if magic != MAGIC:
        raise ValueError("ids file: not one")
    h = Header(count, length, (off, n), digest, strings)
    if os.fstat(fd).st_size < h.strings_at + strings:
        raise ValueError("ids file: cut short")
    return h


def _read(fd: int, n: int, at: int) -> bytes:
    raw = os.pread(fd, n, at)
    if len(raw) != n:
        raise ValueError("ids file: cut short")
    return raw


def _in_block(block: bytes, start: int, k: bytes) -> tuple[int, bytes | None]:
    keys = [block[i: i + KEY] for i in range(0, len(block), RECORD)]
    i = bisect.bisect_left(keys, k)
    found = block[i * RECORD: (i + 1) * RECORD] if i < len(keys) and keys[i] == k else None
    return start + i, found


def _search(fd: int, count: int, k: bytes) -> tuple[int, bytes | None]:
    """(the position of the first record whose key is not below `k`, that record when its key is `k`).
    Interpolation over uniform keys: one or two blocks read at any size; halving after four guesses."""
    lo, hi, klo, khi = 0, count, 0, 1 << (8 * KEY)  # the keys of records[lo:hi] lie in [klo, khi)
    target, rounds = int.from_bytes(k, "big"), 0
    while hi - lo > BLOCK:
        rounds += 1
        guess = lo + (target - klo) * (hi - lo) // max(1, khi - klo) if rounds <= 4 else (lo + hi) // 2
        start = min(max(guess - BLOCK // 2, lo), hi - BLOCK)
        block = _read(fd, BLOCK * RECORD, HEADER.size + start * RECORD)
        first, last = int.from_bytes(block[:KEY], "big"), int.from_bytes(block[-RECORD: -RECORD + KEY], "big")
        if target < first:
            hi, khi = start, first
        elif target > last:
            lo, klo = start + BLOCK, last + 1
        else:
            return _in_block(block, start, k)
    return _in_block(_read(fd, (hi - lo) * RECORD, HEADER.size + lo * RECORD), lo, k)


def _value(fd: int, h: Header, record: bytes) -> str:
    tag = record[KEY]
    if tag != OVERFLOW:
        return record[KEY + 1: KEY + 1 + tag].decode("utf-8", "surrogatepass")
    off, n = POINTER.unpack_from(record, KEY + 1)
    return _read(fd, n, h.strings_at + off).decode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class IdFile:
    """The ids file a wake found valid. No id is held: each look-up opens the file and reads a few KiB
    (no descriptor kept per live session). A file replaced since (a merge by this holder) is read as it
    is now: every version describes a prefix of the same append-only transcript."""

    path: Path

    def get(self, k: bytes) -> str | None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            h = _header(fd)
            _, record = _search(fd, h.count, k)
            return None if record is None else _value(fd, h, record)
        finally:
            os.close(fd)


def read_header(transcript: Path) -> Header | None:
    """The ids file's header when it describes a prefix of this transcript (its last line is still
    there, hashing the same); None when missing, corrupt or stale."""
    try:
        fd = os.open(ids_path(transcript), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        h = _header(fd)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return h if describes(transcript, h.length, h.last, h.last_hash.hex()) else None


def describes(transcript: Path, length: int, last: Span, digest: str) -> bool:
    """The transcript still begins with the prefix described (shared/history/transcript_index.py "Crash rules"):
    at least `length` bytes, and its line at `last`, ending there, hashes (sha256) to `digest`."""
    if sum(last) + 1 != length or file_size(transcript) < length:
        return False
    try:
        (line,) = read_spans(transcript, [last])
    except (OSError, ValueError):
        return False
    return hashlib.sha256(line).hexdigest() == digest


def _encode(value: str, strings: int) -> tuple[bytes, bytes]:
    """(the record's value part, what it adds to the strings region at offset `strings`)."""
    raw = value.encode("utf-8", "surrogatepass")
    if len(raw) < VALUE:
        return bytes([len(raw)]) + raw.ljust(VALUE - 1, b"\0"), b""
    return (bytes([OVERFLOW]) + POINTER.pack(strings, len(raw))).ljust(VALUE, b"\0"), raw


def _copy(fd: int, start: int, end: int) -> Iterator[bytes]:
    while start < end:
        chunk = _read(fd, min(SLICE, end - start), start)
        start += len(chunk)
        yield chunk


def _write(path: Path, chunks: Iterable[bytes]) -> None:
    """The file whole or not at all (shared/storage/disk.py `atomic_write_bytes`, streamed)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb", buffering=SLICE) as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        discard_temp(Path(tmp), lambda: os.unlink(tmp))
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def merge(transcript: Path, items: Iterable[tuple[bytes, str]], length: int, last: Span, last_hash: str,
          keep: bool) -> None:
    """A new ids file describing the transcript's first `length` bytes: the records of the current one
    (`keep`: it is valid and describes the lines before those `items` come from) with `items` (key,
    entry id) added; a key already there keeps its entry."""
    path = ids_path(transcript)
    new = sorted(dict(items).items())
    fd = os.open(path, os.O_RDONLY) if keep else -1
    try:
        old = _header(fd) if keep else Header(0, 0, (0, 0), b"", 0)
        fresh: list[tuple[int, bytes]] = []
        grown: list[bytes] = []
        strings = old.strings
        for k, value in new:
            pos, found = _search(fd, old.count, k) if keep else (0, None)
            if found is None:
                enc, extra = _encode(value, strings)
                fresh.append((pos, k + enc))
                grown.append(extra)
                strings += len(extra)
        h = Header(old.count + len(fresh), length, last, bytes.fromhex(last_hash), strings)

        def chunks() -> Iterator[bytes]:
            yield h.pack()
            prev = 0
            for pos, record in fresh:
                yield from _copy(fd, HEADER.size + prev * RECORD, HEADER.size + pos * RECORD)
                yield record
                prev = pos
            yield from _copy(fd, HEADER.size + prev * RECORD, old.strings_at)
            yield from _copy(fd, old.strings_at, old.strings_at + old.strings)
            yield b"".join(grown)

        _write(path, chunks())
    finally:
        if fd >= 0:
            os.close(fd)


RECENT_MAX = 2048  # ids the index keeps (and a live session holds) before they move to the file


def prompt_key(prompt_id: str) -> bytes:
    return key("p", prompt_id)


def source_key(source: tuple[str, str]) -> bytes:
    return key("s", *source)


def compaction_key(request_id: str) -> bytes:
    return key("c", request_id)


class Known(Generic[K]):
    """What `Transcript.prompts`, `.sources` and `.compactions` answer: is an id recorded, and by which
    entry. The ids folded since the file's `length` first (in memory), then the file (a few KiB read)."""

    def __init__(self, recent: Mapping[K, str], older: IdFile | None, key_of: Callable[[K], bytes]) -> None:
        self.recent, self.older, self.key_of = recent, older, key_of

    def get(self, k: K, default: str | None = None) -> str | None:
        if k in self.recent:
            return self.recent[k]
        found = self.older.get(self.key_of(k)) if self.older is not None else None
        return default if found is None else found

    def __contains__(self, k: object) -> bool:
        return self.get(k) is not None  # type: ignore[arg-type]

    def __getitem__(self, k: K) -> str:
        found = self.get(k)
        if found is None:
            raise KeyError(k)
        return found


class Ids(Protocol):
    """The ids an index keeps (shared/history/transcript_index.py `TranscriptIndex`)."""

    @property
    def prompts(self) -> Mapping[str, str]: ...
    @property
    def sources(self) -> Sequence[tuple[str, str, str]]: ...
    @property
    def compactions(self) -> Sequence[str]: ...


def items(index: Ids) -> list[tuple[bytes, str]]:
    """The index's ids as records to merge: (key, the entry that recorded it)."""
    return [*((prompt_key(p), e) for p, e in index.prompts.items()),
            *((source_key((s, i)), e) for s, i, e in index.sources), *((compaction_key(c), "") for c in index.compactions)]


def older_ids(transcript: Path, ids_length: int) -> IdFile | None | Literal[False]:
    """The ids file an index counts on (None: it counts on none, `ids_length` 0); False when it is
    missing, stale or describes fewer bytes than `ids_length`: the index must be rebuilt."""
    if ids_length == 0:
        return None
    header = read_header(transcript)
    return False if header is None or header.length < ids_length else IdFile(ids_path(transcript))
