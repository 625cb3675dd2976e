"""What the sandbox's seccomp filter costs CPU-bound work, loaded three ways (issue 14).

Kernels before 5.16 switch on the speculative-store-bypass (and STIBP) mitigations for every process
that loads a seccomp filter, unless the filter is loaded with SECCOMP_FILTER_FLAG_SPEC_ALLOW. That
would slow the sandbox's compile and correctness stages. Each mode runs in fresh processes:
  none        no filter
  prctl       the filter through prctl(PR_SET_SECCOMP): the mitigations as the kernel's default says
  spec_allow  the filter through seccomp(2) with SPEC_ALLOW: what drkernel.sandbox.plumbing.isolation does
and prints the process's speculation status beside the time of a pure-Python loop, of compiling a
large source, and of 40 fork+exec of /bin/true. Linux x86_64 only.
Run:  python bench/probes/seccomp_cost.py [--procs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import ctypes, json, subprocess, sys, time
from drkernel.sandbox.plumbing import isolation
mode = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
if mode == "prctl":
    isolation.install_seccomp(spec_allow=False)
elif mode == "spec_allow":
    isolation.install_seccomp(spec_allow=True)
status = {k.strip(): v.strip()
          for k, v in (line.split(":", 1) for line in open("/proc/self/status") if ":" in line)}
out = {"ssb": status.get("Speculation_Store_Bypass"), "ib": status.get("SpeculationIndirectBranch"),
       "seccomp": status.get("Seccomp")}
t = time.perf_counter(); acc = 0
for i in range(3_000_000):
    acc += i * i % 7
out["loop_s"] = time.perf_counter() - t
src = "\n".join(f"def f{i}(a, b):\n    return [x * {i} + b for x in a if x % 3]" for i in range(4000))
t = time.perf_counter(); compile(src, "big", "exec"); out["compile_s"] = time.perf_counter() - t
t = time.perf_counter()
for _ in range(40):
    subprocess.run(["/bin/true"], check=True)
out["spawn_s"] = time.perf_counter() - t
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=3)
    args = ap.parse_args()
    if not sys.platform.startswith("linux"):
        sys.exit("Linux only")
    print(f"kernel {subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout.strip()}")
    for f in ("spec_store_bypass", "spectre_v2"):
        try:
            print(f"{f}: {open(f'/sys/devices/system/cpu/vulnerabilities/{f}').read().strip()}")
        except OSError as exc:
            print(f"{f}: {exc}")
    rows = {}
    for _ in range(args.procs):  # interleaved, so that drift of the machine hits every mode alike
        for mode in ("none", "prctl", "spec_allow"):
            p = subprocess.run([sys.executable, "-c", CHILD, mode],
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                print(f"{mode}: failed: {p.stderr.strip()[-400:]}")
                continue
            rows.setdefault(mode, []).append(json.loads(p.stdout.strip().splitlines()[-1]))
    print(f"{'mode':<11} {'loop s':>8} {'compile s':>10} {'40 spawns s':>12}  speculation store bypass")
    base = None
    for mode, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("loop_s", "compile_s", "spawn_s")}
        base = base or med
        rel = " ".join(f"{med[k] / base[k]:.2f}x" for k in med)
        print(f"{mode:<11} {med['loop_s']:8.3f} {med['compile_s']:10.3f} {med['spawn_s']:12.3f}  "
              f"{runs[0]['ssb']} (seccomp {runs[0]['seccomp']}; vs none {rel})")


if __name__ == "__main__":
    main()
