"""The commands of the shared stream reader (shared/streams/stream_reader.py): its blocking reads, packed once
per stream set, and the read of a group consumer's own pending entries after a failed read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReadGroup:
    name: str
    consumer: str


@dataclass(frozen=True)
class PackedRead:
    """A shard's read, packed once per stream set (redis-py would pack it again for every call, on the
    event loop: ~1 ms with 200 streams, bench-inject; the fan-out's per-read packing was 7% of the
    proxy's loop, bench-stream): in a group the whole command, without one all but the ids."""
    key: tuple[int, int]  # (count, block_ms)
    names: list[str]
    streams: list[str]
    head: bytes
    name_of: dict[str, str]  # stream -> name


def pack_read(group: ReadGroup | None, names: list[str], streams: list[str], count: int, block_ms: int) -> PackedRead:
    if group is None:
        args = ["XREAD", "COUNT", str(count), "BLOCK", str(block_ms), "STREAMS", *streams]
    else:
        args = ["XREADGROUP", "GROUP", group.name, group.consumer, "COUNT", str(count), "BLOCK", str(block_ms),
                "STREAMS", *streams, *([">"] * len(streams))]
    size = len(args) + (len(streams) if group is None else 0)
    return PackedRead((count, block_ms), names, streams, b"*%d\r\n" % size + b"".join(_bulk(arg) for arg in args),
                      dict(zip(streams, names, strict=True)))


def read_command(packed: PackedRead, group: ReadGroup | None, last: dict[str, str]) -> bytes:
    """The read's bytes: without a group, each stream is read from the id last handed out."""
    if group is not None:
        return packed.head
    return packed.head + b"".join(_bulk(last.get(name, "0-0")) for name in packed.names)


def own_pending_command(group: ReadGroup, streams: list[str], after: list[str], count: int) -> tuple[str, ...]:
    """The consumer's own pending entries of each stream above the id given for it (an id, not `>`:
    Redis answers from the pending list at once, without blocking, and delivers nothing new)."""
    return ("XREADGROUP", "GROUP", group.name, group.consumer, "COUNT", str(count), "STREAMS", *streams, *after)


def id_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id in the order Redis gives them (`ms-seq`)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _bulk(arg: str) -> bytes:
    data = arg.encode()
    return b"$%d\r\n%b\r\n" % (len(data), data)
