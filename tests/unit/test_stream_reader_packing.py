"""The shared stream reader packs its blocking reads itself, once per stream set (shared/streams/stream_reader.py):
the bytes are those redis-py would send, with each stream's last id appended per read without a group."""

from __future__ import annotations

from redis.asyncio.connection import Connection

from shared.redis import keys
from shared.streams.stream_packing import ReadGroup, pack_read, read_command


def redis_py(*args: str | int) -> bytes:
    return b"".join(Connection().pack_command(*args))


def test_a_read_without_a_group_names_each_stream_from_its_last_id() -> None:
    names = ["s1", "s2"]
    streams = [keys.events(n) for n in names]
    packed = pack_read(None, names, streams, 200, 15000)
    last = {"s1": "1733300000000-3", "s2": "0-0"}
    assert read_command(packed, None, last) == redis_py("XREAD", "COUNT", 200, "BLOCK", 15000, "STREAMS", *streams,
                                                        "1733300000000-3", "0-0")
    last["s1"] = "1733300000001-0"  # handed out since: the next read starts after it
    assert read_command(packed, None, last).endswith(b"$15\r\n1733300000001-0\r\n$3\r\n0-0\r\n")
    assert packed.name_of == dict(zip(streams, names, strict=True))


def test_a_read_in_a_group_is_packed_once() -> None:
    group = ReadGroup("runtime", "worker-é")
    streams = [keys.inbox(n) for n in ("a", "b", "c")]
    packed = pack_read(group, ["a", "b", "c"], streams, 100, 500)
    assert read_command(packed, group, {}) == redis_py("XREADGROUP", "GROUP", "runtime", "worker-é", "COUNT", 100,
                                                       "BLOCK", 500, "STREAMS", *streams, ">", ">", ">")
