"""Output tensors between processes: a raw file format with a JSON header, no pickle at all.

A sandbox writes its outputs with `write_tensors`; the judge reads them with `read_tensors`, which
trusts nothing in the file: the header is parsed as JSON, every dtype must be on an allow-list,
every shape must account for exactly the bytes that follow, and the file has a size limit.

Layout: MAGIC, an 8-byte little-endian header length, the header
(`{"tensors": [{"dtype": "float32", "shape": [4, 8], "nbytes": 128}, ...]}`), then each
tensor's bytes, contiguous, in order.

GPU tensors move through a small pinned staging buffer in chunks: KernelBench-sized outputs
(a GiB or more) cost a fraction of what pickling them through torch.save and torch.load did.
"""

from __future__ import annotations

import ctypes
import errno
import json
import math
import os
import stat
import struct
import threading
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["MAGIC", "Entry", "Staging", "TensorFileError", "open_output", "read_entries", "read_header",
           "read_tensors", "write_tensors"]

MAGIC = b"DRKTENS1"
_CHUNK = 64 << 20
_MAX_HEADER = 1 << 20
_MAX_DIMS = 16

_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float64", "float32", "float16", "bfloat16", "complex64", "complex128", "int64", "int32",
        "int16", "int8", "uint8", "bool", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
        "float8_e5m2fnuz", "uint16", "uint32", "uint64",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
}


class TensorFileError(ValueError):
    """The file is not a well-formed tensor file (the candidate's problem, never the judge's)."""


class Staging:
    """A reusable pinned host buffer for chunked device <-> file copies (CPU tensors need none).

    Readers and writers that are given none use one per thread.
    """

    def __init__(self, chunk_bytes: int = _CHUNK) -> None:
        self.chunk_bytes = chunk_bytes
        self._buf: torch.Tensor | None = None

    def buffer(self) -> torch.Tensor:
        if self._buf is None:
            try:
                self._buf = torch.empty(self.chunk_bytes, dtype=torch.uint8, pin_memory=True)
            except RuntimeError:  # no pinnable memory: pageable still works, only slower
                self._buf = torch.empty(self.chunk_bytes, dtype=torch.uint8)
        return self._buf


_local = threading.local()


def _thread_staging() -> Staging:
    """The calling thread's own staging buffer, made on first use and kept (pinning is slow)."""
    staging = getattr(_local, "staging", None)
    if staging is None:
        staging = _local.staging = Staging()
    return staging


def _mv(t: torch.Tensor) -> memoryview:
    """The host memory of a CPU uint8 tensor, writable, without a copy.

    Through ctypes, not `Tensor.numpy()`: torch does not require numpy, so the judge must not either.
    """
    assert t.device.type == "cpu" and t.dtype == torch.uint8 and t.is_contiguous()
    raw = (ctypes.c_ubyte * t.numel()).from_address(t.data_ptr())
    raw._owner = t  # type: ignore[attr-defined]  # the view keeps the tensor's memory alive
    return memoryview(raw).cast("B")


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of a contiguous tensor (any dtype, 0-d included)."""
    flat = t.reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def write_tensors(path: str, tensors: list[torch.Tensor], staging: Staging | None = None) -> int:
    """Write plain tensors to `path`; returns the bytes written. Tensors are made contiguous."""
    for t in tensors:
        if str(t.dtype).removeprefix("torch.") not in _DTYPES:
            raise TensorFileError(f"an output of dtype {t.dtype} cannot be judged")
    plain = [t.detach().contiguous() for t in tensors]
    entries = [{"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                "nbytes": t.numel() * t.element_size()} for t in plain]
    header = json.dumps({"tensors": entries}, separators=(",", ":")).encode()
    written = 0
    with open(path, "wb", buffering=0) as f:
        f.write(MAGIC + struct.pack("<Q", len(header)) + header)
        for t in plain:
            raw = _bytes_of(t)
            if raw.device.type == "cpu":
                f.write(_mv(raw))
            else:
                buf = (staging or _thread_staging()).buffer()
                for start in range(0, raw.numel(), buf.numel()):
                    n = min(buf.numel(), raw.numel() - start)
                    buf[:n].copy_(raw[start : start + n])
                    f.write(_mv(buf[:n]))
            written += raw.numel()
    return written


def _read_exact(f: Any, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise TensorFileError("the file ends before its tensors do")
        got += n


def _entry(e: Any) -> tuple[torch.dtype, list[int], int]:
    if not isinstance(e, dict) or set(e) != {"dtype", "shape", "nbytes"}:
        raise TensorFileError("malformed tensor entry")
    dtype = _DTYPES.get(e["dtype"]) if isinstance(e["dtype"], str) else None
    shape, nbytes = e["shape"], e["nbytes"]
    if dtype is None:
        raise TensorFileError(f"dtype {e['dtype']!r} is not allowed")
    if not isinstance(shape, list) or len(shape) > _MAX_DIMS or not all(
        type(d) is int and 0 <= d < (1 << 40) for d in shape
    ):
        raise TensorFileError("malformed shape")
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if type(nbytes) is not int or nbytes != math.prod(shape) * itemsize:
        raise TensorFileError("byte count does not match the shape")
    return dtype, shape, nbytes


@dataclass(frozen=True)
class Entry:
    """One tensor of a file, as its header announced it (validated)."""

    dtype: torch.dtype
    shape: list[int]
    nbytes: int
    offset: int  # of its first byte in the file

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def open_output(path: str) -> Any:
    """Open a file a sandbox wrote, for reading; raises TensorFileError unless it is the sandbox's own.

    The name must not be a symbolic link (O_NOFOLLOW), the file must be a regular file with no other
    name (no hard link to someone else's file) and owned by whoever owns its folder: the sandbox's
    uid where it has one. A link into the reference's folder is refused, never followed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TensorFileError("the output file is a symbolic link") from None
        raise
    f = open(fd, "rb", buffering=0)  # noqa: SIM115 - returned to the caller, who closes it
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TensorFileError("the output file is not a regular file")
        if st.st_nlink != 1:
            raise TensorFileError("the output file has another name (a hard link)")
        if st.st_uid != os.lstat(os.path.dirname(os.path.abspath(path))).st_uid:
            raise TensorFileError("the output file is not owned by the sandbox that wrote it")
    except BaseException:
        f.close()
        raise
    return f


def read_header(path: str, expected: int, max_bytes: int = 4 << 30,
                expect: list[tuple[torch.dtype | str, list[int]]] | None = None) -> list[Entry]:
    """Parse and check a tensor file's header against the file's size. Raises TensorFileError.

    `expect`: the (dtype, shape) of each tensor, when known (the reference's; a dtype may be given as
    torch.float32 or "torch.float32" or "float32"): a file that
    announces anything else is refused before a byte of its data is read.
    """
    with open_output(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes + _MAX_HEADER:
            raise TensorFileError("output file exceeds the size limit")
        head = f.read(len(MAGIC) + 8)
        if len(head) != len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
            raise TensorFileError("not a tensor file")
        (hlen,) = struct.unpack("<Q", head[len(MAGIC) :])
        if hlen > _MAX_HEADER:
            raise TensorFileError("header too large")
        try:
            header = json.loads(f.read(hlen))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TensorFileError(f"unreadable header: {exc}") from None
    raw_entries = header.get("tensors") if isinstance(header, dict) else None
    if not isinstance(raw_entries, list) or len(raw_entries) != expected:
        raise TensorFileError("output file does not hold the announced tensors")
    parsed = [_entry(e) for e in raw_entries]
    if expect is not None:
        got = [(_dtype_name(d), s) for d, s, _ in parsed]
        if got != [(_dtype_name(d), list(s)) for d, s in expect]:
            raise TensorFileError(f"output dtypes and shapes {_describe(got)} differ from the expected "
                                  f"{_describe(expect)}")
    total = sum(n for _, _, n in parsed)
    if total > max_bytes:
        raise TensorFileError("output file exceeds the size limit")
    offset = len(MAGIC) + 8 + hlen
    if offset + total != size:
        raise TensorFileError("file size does not match its header")
    entries = []
    for dtype, shape, nbytes in parsed:
        entries.append(Entry(dtype, shape, nbytes, offset))
        offset += nbytes
    return entries


def _dtype_name(d: Any) -> str:
    return str(d).removeprefix("torch.")


def _describe(pairs: Any) -> str:
    return ", ".join(f"{str(d).removeprefix('torch.')}{list(s)}" for d, s in pairs) or "none"


def read_tensors(
    path: str, expected: int, device: str = "cpu", max_bytes: int = 4 << 30,
    staging: Staging | None = None, expect: list[tuple[torch.dtype | str, list[int]]] | None = None,
) -> list[torch.Tensor]:
    """Read `expected` tensors from a file a sandbox wrote, onto `device`. Raises TensorFileError."""
    entries = read_header(path, expected, max_bytes, expect)
    return read_entries(path, entries, device, staging)


def read_entries(path: str, entries: list[Entry], device: str = "cpu",
                 staging: Staging | None = None) -> list[torch.Tensor]:
    """Read each entry of a header `read_header` checked, from a file opened again (and rechecked)."""
    target = torch.device(device)
    out = []
    with open_output(path) as f:
        end = entries[-1].offset + entries[-1].nbytes if entries else None
        if end is not None and os.fstat(f.fileno()).st_size != end:
            raise TensorFileError("file size does not match its header")
        for e in entries:
            f.seek(e.offset)
            if target.type == "cpu":
                raw = torch.empty(e.nbytes, dtype=torch.uint8)
                _read_exact(f, _mv(raw))
            else:
                raw = torch.empty(e.nbytes, dtype=torch.uint8, device=target)
                buf = (staging or _thread_staging()).buffer()
                for start in range(0, e.nbytes, buf.numel()):
                    n = min(buf.numel(), e.nbytes - start)
                    _read_exact(f, _mv(buf[:n]))
                    raw[start : start + n].copy_(buf[:n])
            out.append(raw.view(e.dtype).reshape(e.shape) if e.nbytes
                       else torch.empty(e.shape, dtype=e.dtype, device=target))
    return out
