"""Memory two processes map at once: the judge's side writes a timed call's inputs into it and reads
its outputs back, and the candidate's sandbox computes on it (issue 32, the sealed span).

One `Region` is a run of bytes a file descriptor names, which travels between processes over a Unix
socket (SCM_RIGHTS): on the CPU a memfd, mapped with mmap; on a GPU device memory made with CUDA's
virtual memory API (cuMemCreate), exported as a POSIX file descriptor and mapped into each process's
own address space (cuMemImportFromShareableHandle, cuMemMap). `views` lays tensors over it from a
layout both sides agree on. Torch, ctypes and the standard library only.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ALIGN", "Entry", "Region", "dtype_of", "layout"]

ALIGN = 256  # every tensor starts on this many bytes: enough for any dtype and for vector loads
_DTYPES = {str(d): d for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
                               torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
                               torch.complex64, torch.complex128)}

_POSIX_FD, _PINNED, _ON_DEVICE, _READ_WRITE = 1, 1, 1, 3


@dataclass
class Entry:
    """One tensor of the region: which call, which input or output, where and what."""

    kind: str  # "in" or "out"
    call: int
    index: int  # the position among the call's inputs (or flattened outputs)
    offset: int
    shape: list[int]
    dtype: str

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n * torch.empty((), dtype=dtype_of(self.dtype)).element_size()


def dtype_of(name: str) -> torch.dtype:
    """The torch dtype a layout names; a name outside the supported set is a ValueError."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"no shared tensor of dtype {name!r}") from None


def layout(calls: int, inputs: list[Any], outputs: list[torch.Tensor]) -> tuple[list[Entry], int]:
    """The entries of `calls` calls, each with the tensors among `inputs` and all of `outputs`, packed
    at ALIGN, every call's inputs first and then every call's outputs (one run of bytes, which the
    judge's side poisons and takes out with one device copy each); and the bytes they need."""
    entries: list[Entry] = []
    offset = 0
    for kind, items in (("in", inputs), ("out", outputs)):
        for call in range(calls):
            for index, t in enumerate(items):
                if not isinstance(t, torch.Tensor):
                    continue
                entry = Entry(kind, call, index, offset, [int(s) for s in t.shape], str(t.dtype))
                dtype_of(entry.dtype)
                entries.append(entry)
                offset += -(-max(entry.nbytes, 1) // ALIGN) * ALIGN
    return entries, max(offset, ALIGN)


class Region:
    """A shared run of bytes, mapped in this process. `create` makes one (its `fd` is to be sent);
    `open` maps one received. `close` unmaps it; the memory goes with the last process that maps it."""

    def __init__(self, device: str, size: int, fd: int, base: int, keep: Any) -> None:
        self.device, self.size, self.fd, self._base, self._keep = device, size, fd, base, keep

    # -- making and mapping ---------------------------------------------------------------------
    @classmethod
    def create(cls, device: str, size: int) -> Region:
        if not device.startswith("cuda"):
            fd = os.memfd_create("drkernel-sealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, size)
            # its size fixed for good: a process that maps it cannot shrink it under the other's
            # mapping (whose next touch past the end would be a SIGBUS in the judge's side)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            return cls._map_cpu(device, size, fd)
        cu, dev = _driver(), _ordinal(device)
        prop = _Prop(_PINNED, _POSIX_FD, _Location(_ON_DEVICE, dev), None, _AllocFlags())
        gran = ctypes.c_size_t()
        _ok(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
        size = -(-size // gran.value) * gran.value
        handle = ctypes.c_uint64()
        _ok(cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop),
                           ctypes.c_uint64(0)), "cuMemCreate")
        exported = ctypes.c_int(-1)
        try:
            _ok(cu.cuMemExportToShareableHandle(ctypes.byref(exported), ctypes.c_uint64(handle.value),
                                                ctypes.c_int(_POSIX_FD), ctypes.c_uint64(0)),
                "cuMemExportToShareableHandle")
            return cls(device, size, exported.value, _map_device(cu, handle.value, size, dev), handle.value)
        except BaseException:
            cu.cuMemRelease(ctypes.c_uint64(handle.value))
            raise

    @classmethod
    def open(cls, device: str, size: int, fd: int) -> Region:
        """Map a region another process made (`fd` is taken over: closed by `close`)."""
        if not device.startswith("cuda"):
            if os.fstat(fd).st_size < size:
                os.close(fd)
                raise ValueError("the shared region is smaller than its layout")
            return cls._map_cpu(device, size, fd)
        cu, dev = _driver(), _ordinal(device)
        handle = ctypes.c_uint64()
        _ok(cu.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                              ctypes.c_int(_POSIX_FD)), "cuMemImportFromShareableHandle")
        try:
            return cls(device, size, fd, _map_device(cu, handle.value, size, dev), handle.value)
        except BaseException:
            cu.cuMemRelease(ctypes.c_uint64(handle.value))
            raise

    @classmethod
    def _map_cpu(cls, device: str, size: int, fd: int) -> Region:
        mem = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        return cls(device, size, fd, 0, mem)

    # -- tensors over it ------------------------------------------------------------------------
    def tensor(self, entry: Entry) -> torch.Tensor:
        """The tensor an entry lays over the region (bounds checked: a layout is never trusted)."""
        n = entry.nbytes
        if entry.offset < 0 or entry.offset % ALIGN or entry.offset + n > self.size:
            raise ValueError(f"a shared tensor outside the region: {entry}")
        dtype = dtype_of(entry.dtype)
        if self.device.startswith("cuda"):
            flat = _device_bytes(self._base + entry.offset, n, self.device)
        else:
            flat = torch.frombuffer(self._keep, dtype=torch.uint8, count=n, offset=entry.offset) if n else \
                torch.empty(0, dtype=torch.uint8)
        return flat.view(dtype).view(entry.shape)

    def close(self) -> None:
        keep, self._keep = self._keep, None
        if keep is None:
            return
        if isinstance(keep, mmap.mmap):
            try:
                keep.close()
            except BufferError:  # a tensor still views it: the mapping goes with the process
                pass
        else:
            cu = _driver()
            cu.cuMemUnmap(ctypes.c_uint64(self._base), ctypes.c_size_t(self.size))
            cu.cuMemAddressFree(ctypes.c_uint64(self._base), ctypes.c_size_t(self.size))
            cu.cuMemRelease(ctypes.c_uint64(keep))
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# -- CUDA's driver API, through ctypes ---------------------------------------------------------------
class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_LIB: ctypes.CDLL | None = None


def _driver() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        torch.cuda.init()  # the primary context, current on this thread, before any driver call
        _LIB = ctypes.CDLL("libcuda.so.1")
    torch.empty(1, device="cuda")
    return _LIB


def _ordinal(device: str) -> int:
    return int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()


def _ok(rc: int, what: str) -> None:
    if rc == 2:  # CUDA_ERROR_OUT_OF_MEMORY: the device's memory, which a candidate may have taken
        raise MemoryError(f"{what} failed: out of memory (CUresult 2)")
    if rc != 0:
        raise RuntimeError(f"{what} failed: CUresult {rc}")


def _map_device(cu: ctypes.CDLL, handle: int, size: int, dev: int) -> int:
    ptr = ctypes.c_uint64()
    _ok(cu.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                               ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
    try:
        _ok(cu.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                        ctypes.c_uint64(0)), "cuMemMap")
        access = _Access(_Location(_ON_DEVICE, dev), _READ_WRITE)
        _ok(cu.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)),
            "cuMemSetAccess")
    except BaseException:
        cu.cuMemUnmap(ptr, ctypes.c_size_t(size))
        cu.cuMemAddressFree(ptr, ctypes.c_size_t(size))
        raise
    return ptr.value


def _device_bytes(ptr: int, n: int, device: str) -> torch.Tensor:
    class _View:
        __cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3}

    return torch.as_tensor(_View(), device=device)
