"""Can a trusted process share device memory with a sandboxed one, and see its GPU work? (issue 32)

A feasibility probe for timing the candidate from outside its address space: the judge's side would
fill each timed call's inputs itself, into memory the candidate's sandbox maps, so that no input
exists in the candidate's reach before the timed span starts, and no fill of the candidate's own
can be shortened. Two questions, on the lent GPU:

1. Sharing: the parent (root) makes device memory with CUDA's virtual memory API, exportable as a
   POSIX file descriptor, and passes the descriptor over a Unix socket to a child inside the
   sandbox's real isolation (its own PID, mount, network and IPC namespaces, a uid of its own, the
   seccomp filter). Can the child import and map it, read what the parent wrote, write back?
2. Contention: while the child keeps the GPU busy (a spin kernel in its own context), how much
   longer does the parent's own timed fill take on its events? Contexts of two processes take turns
   on the GPU (no MPS), so a candidate that computes while the judge fills would show there.

Prints one JSON object (also to --out). No GPU: says so and exits 0.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import socket
import sys
import tempfile
import time

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3


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


def _cuda() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what}: CUresult {rc}")


def _prop(device: int) -> _Prop:
    return _Prop(CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                 _Location(CU_MEM_LOCATION_TYPE_DEVICE, device), None, _AllocFlags())


def _map(cu: ctypes.CDLL, handle: int, size: int, device: int) -> int:
    ptr = ctypes.c_uint64()
    _ok(cu.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                               ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
    _ok(cu.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_uint64(handle),
                    ctypes.c_uint64(0)), "cuMemMap")
    access = _Access(_Location(CU_MEM_LOCATION_TYPE_DEVICE, device), CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    _ok(cu.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1)),
        "cuMemSetAccess")
    return ptr.value


def _tensor(ptr: int, n: int):  # noqa: ANN202 - a torch.Tensor over memory we mapped
    import torch

    class View:
        __cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3}

    return torch.as_tensor(View(), device="cuda")


def _child(sock: socket.socket, workdir: str) -> None:
    """In the sandbox's isolation: map the parent's memory, check it, answer; then spin on request."""
    from drkernel.sandbox.plumbing import isolation

    isolation.enter({"uid": 65534, "keep": [workdir], "hide": [], "expose": list(isolation.needed_paths())})
    report: dict[str, object] = {"uid": os.getuid(), "pid": os.getpid()}
    try:
        import torch

        torch.cuda.init()
        torch.empty(1, device="cuda")
        msg, fds, _, _ = socket.recv_fds(sock, 1024, 1)
        size, n = json.loads(msg)
        cu = _cuda()
        handle = ctypes.c_uint64()
        _ok(cu.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fds[0]),
                                              ctypes.c_int(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)),
            "cuMemImportFromShareableHandle")
        x = _tensor(_map(cu, handle.value, size, 0), n)
        expect = torch.arange(n, device="cuda", dtype=torch.float32)
        report["read_ok"] = bool(torch.equal(x, expect))
        x.neg_()
        torch.cuda.synchronize()
        report["mapped"] = True
    except Exception as exc:  # noqa: BLE001 - a probe reports what failed
        report["error"] = f"{type(exc).__name__}: {exc}"
    sock.sendall(json.dumps(report).encode())
    while True:  # spin requests: b"spin <ms>"
        data = sock.recv(64)
        if not data:
            os._exit(0)
        ms = float(data.split()[1])
        import torch

        torch.cuda._sleep(int(ms * 1.4e6))  # ~1.4 GHz-ish cycles; calibrated by what the parent sees
        sock.sendall(b"queued")
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args()
    import torch

    from drkernel.sandbox.plumbing import isolation

    if torch.cuda.device_count() == 0:  # NVML: no CUDA initialised before the fork
        print(json.dumps({"skipped": "no GPU"}))
        return 0
    if torch.cuda.is_initialized():
        raise SystemExit("CUDA initialised before the fork")
    ours, theirs = socket.socketpair()
    workdir = tempfile.mkdtemp(prefix="drkernel-ipc-probe-")
    os.chown(workdir, 65534, 65534)
    isolation.new_pid_namespace()
    pid = os.fork()
    if pid == 0:
        ours.close()
        try:
            _child(theirs, workdir)  # enter() forks: PID 1 stays as the namespace's init
        finally:
            os._exit(1)
    theirs.close()
    # this process's own children back in its own PID namespace: CUDA refused to start in a process
    # whose next children would be PID 1 of another ("devices busy or unavailable", run AR)
    isolation._check(isolation._c().setns(isolation._own_pid_ns, isolation.CLONE_NEWPID), "setns")
    result: dict[str, object] = {"device": torch.cuda.get_device_name(0)}
    torch.cuda.init()
    torch.empty(1, device="cuda")
    cu = _cuda()
    n = args.mib << 18  # floats
    prop = _prop(0)
    gran = ctypes.c_size_t()
    _ok(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
    size = -(-(n * 4) // gran.value) * gran.value
    handle = ctypes.c_uint64()
    _ok(cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_uint64(0)),
        "cuMemCreate")
    fd = ctypes.c_int(-1)
    _ok(cu.cuMemExportToShareableHandle(ctypes.byref(fd), ctypes.c_uint64(handle.value),
                                        ctypes.c_int(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                                        ctypes.c_uint64(0)), "cuMemExportToShareableHandle")
    x = _tensor(_map(cu, handle.value, size, 0), n)
    x.copy_(torch.arange(n, device="cuda", dtype=torch.float32))
    torch.cuda.synchronize()
    socket.send_fds(ours, [json.dumps([size, n]).encode()], [fd.value])
    ours.settimeout(120)
    child = json.loads(ours.recv(4096))
    result["child"] = child
    torch.cuda.synchronize()
    result["written_back_ok"] = bool(torch.equal(x, -torch.arange(n, device="cuda", dtype=torch.float32)))

    # contention: the parent's timed fill of the shared buffer, alone and while the child spins
    def timed_fill(reps: int = 20) -> list[float]:
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            x.normal_()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return times

    timed_fill(5)
    alone = timed_fill()
    spun = []
    if child.get("mapped"):
        for ms in (5.0, 50.0):
            ours.sendall(f"spin {ms}".encode())
            ours.recv(64)  # its spin is queued on its own context
            t0 = time.perf_counter()
            busy = timed_fill(5)
            spun.append({"child_spin_ms": ms, "fill_ms": busy, "wall_ms": (time.perf_counter() - t0) * 1e3})
            time.sleep(ms / 1e3 + 0.05)
    result["fill_alone_ms"] = sorted(alone)
    result["fill_beside_spin"] = spun
    ours.close()
    os.waitpid(pid, 0)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
