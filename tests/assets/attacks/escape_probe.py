"""Class 1 and 7: arbitrary Python in the sandbox looks for everything isolation must keep from it.

The gate is off (static_policy=False): this is the barrier's test, not the gate's. Any breach raises,
so the verdict is not ok; the report line says what the sandbox saw.
"""

import os
import resource
import socket

SECRETS = __SECRETS__  # files the judge's side holds (the test writes them, world-readable)
PORT = __PORT__  # a TCP port the test listens on, on 127.0.0.1
EXPOSED = __EXPOSED__  # folders the judge binds back in read-only (drkernel.sandbox.plumbing.isolation.needed_paths)


import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.maximum(x, 0.0) * 2.0 + 1.0
    tl.store(out_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out


def _probe():
    breaches, seen = [], {}
    seen["pid"], seen["uid"] = os.getpid(), os.getuid()
    if os.getuid() == 0 or os.geteuid() == 0:
        breaches.append("runs as root")
    procs = [p for p in os.listdir("/proc") if p.isdigit()]
    seen["procs"] = len(procs)
    for p in procs:
        if p in (str(os.getpid()), "1"):
            continue  # itself and its namespace's init: forked from the fork server, they have its command line
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"pytest" in cmd or b"zygote" in cmd or b"drkernel-reference" in cmd:
            breaches.append(f"sees process {p}: {cmd[:60]!r}")
    for path in SECRETS:
        try:
            with open(path, "rb") as f:
                breaches.append(f"read {path}: {f.read(20)!r}")
        except OSError:
            pass
    own = os.path.dirname(os.getcwd())
    # folders the judge binds back in, read-only, at their own path (the Python installation and the
    # judge's package): the way down to them may show under a covered /tmp; writing there must fail
    on_the_way = {os.path.join(root, p.split("/")[2]) for p in EXPOSED for root in ("/tmp", "/var/tmp", "/run")
                  if p.startswith(root + "/") and len(p.split("/")) > 2}
    for path in EXPOSED:
        try:
            with open(os.path.join(path, "drkernel-probe-x"), "w") as f:
                f.write("x")
            breaches.append(f"wrote into {path}")
        except OSError:
            pass
    for root in ("/tmp", "/dev/shm", "/var/tmp", "/run"):
        try:
            others = [n for n in os.listdir(root) if os.path.join(root, n) != own and not n.startswith("nvidia")
                      and os.path.join(root, n) not in on_the_way]
        except OSError:
            continue
        if others:
            breaches.append(f"lists {root}: {others[:4]}")
    for path in ("/tmp/x", "/var/tmp/x", "/x", "/usr/x", "/run/lock/x", os.path.join(os.path.dirname(own), "x")):
        try:
            with open(path, "w") as f:
                f.write("x")
            if not path.startswith("/dev/shm"):
                breaches.append(f"wrote {path}")
        except OSError:
            pass
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
        breaches.append("reached the network")
    except OSError:
        pass
    seen["interfaces"] = [n for _, n in socket.if_nameindex()]
    for name in ("RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_FSIZE"):
        soft, hard = resource.getrlimit(getattr(resource, name))
        if hard == resource.RLIM_INFINITY:
            breaches.append(f"{name} unlimited")
    print("ISOLATION", seen, flush=True)
    if breaches:
        raise RuntimeError("BREACH " + "; ".join(breaches))


_probe()
