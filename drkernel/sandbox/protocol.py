"""Wire format between the judge and its sandbox processes.

Control messages are length-prefixed JSON on a dedicated pipe pair (never stdout, which the
candidate owns). Tensors travel as raw tensor files (`tensorfile.py`: a JSON header, then bytes):
nothing the sandbox sends is ever unpickled on the judge's side.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

__all__ = ["MAX_MESSAGE_BYTES", "ProtocolError", "read_message", "write_message"]

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_HEADER = struct.Struct("<Q")


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message."""


def write_message(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message, allow_nan=True, default=str).encode()
    payload = _HEADER.pack(len(data)) + data
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the channel")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int) -> dict[str, Any]:
    (length,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    if length > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {length} bytes exceeds the {MAX_MESSAGE_BYTES} limit")
    try:
        message = json.loads(_read_exact(fd, length))
    except ValueError as exc:
        raise ProtocolError(f"malformed message: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError("message is not a JSON object")
    return message
