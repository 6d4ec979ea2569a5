"""Messages between the load generator and its worker processes: through files and pipes.

Each message is a pickle sent whole: a 16-byte header (magic, payload length, CRC-32) and then
the payload. The reader takes exactly that many bytes and checks them before it unpickles.

Large messages (a worker's Job, its report) go through files in the point's temporary folder,
and only the two small handshake messages ("ready", "go") go through the pipes. On vLLM-CPU, with
4 workers at c=888, the parent sometimes got a worker's report from its stdout pipe short or with
bytes missing. No other process held that pipe. Unpickled straight off the pipe, the symptoms were
"invalid load key '\\x00'" just past 64 KB, EOF, or a TypeError from misaligned opcodes. With
this framing they were "the stream ended after 61848 of 160152 bytes". Either way the parent
gave up on a report the worker was still writing, then waited for that worker to exit, while the
worker waited for the parent to read. The point hung (the H200 run's 5-minute wait). The cause
was not found. A report in a file is read once the worker has exited, so neither side waits on
the other, and a damaged one is named: a short read is "ended after N of M bytes", changed bytes
are a CRC mismatch.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from typing import Any, BinaryIO

MAGIC = b"QKW1"
HEADER = struct.Struct("<4sQI")  # magic, payload bytes, crc32 of the payload


class WireError(Exception):
    """A message that did not arrive whole: the stream ended, or its bytes do not check."""


def send(stream: BinaryIO, obj: Any) -> None:
    payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)))
    stream.write(payload)
    stream.flush()


def _read_exactly(stream: BinaryIO, n: int, what: str) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = stream.readinto(view[got:])
        if not k:
            if got == 0 and what == "header":
                raise EOFError("the stream ended before a message")
            raise WireError(f"the stream ended after {got} of {n} bytes of a message's {what}")
        got += k
    return bytes(buf)


def receive(stream: BinaryIO) -> Any:
    """The next message; EOFError at a clean end of the stream, WireError for a damaged one."""
    magic, size, crc = HEADER.unpack(_read_exactly(stream, HEADER.size, "header"))
    if magic != MAGIC:
        raise WireError(f"a message began with {magic!r}, not {MAGIC!r}: something else wrote to the stream")
    payload = _read_exactly(stream, size, "payload")
    if zlib.crc32(payload) != crc:
        raise WireError(f"a message of {size} bytes arrived damaged (CRC-32 {zlib.crc32(payload):08x}, "
                        f"sent as {crc:08x})")
    return pickle.loads(payload)


def write_file(path: str, obj: Any) -> None:
    """One message in a file, whole or not at all (written beside it, then renamed)."""
    import os

    partial = f"{path}.partial"
    with open(partial, "wb") as f:
        send(f, obj)
    os.replace(partial, path)


def read_file(path: str) -> Any:
    with open(path, "rb") as f:
        return receive(f)
