"""Issue 14: what a candidate sandbox's first Triton launch costs, with an empty cache and seeded ones.

Every candidate sandbox compiles into a fresh private Triton cache (a candidate cannot plant binaries
for the next one). Its first launch then builds, besides the kernel itself, Triton's C helpers with the
host's C compiler: the driver's utilities (`cuda_utils`, once per process) and, on Triton versions
with a launcher per kernel signature, that launcher. This times each part in fresh processes:
  empty     an empty cache (what every candidate pays today);
  utils     a cache seeded with the `cuda_utils` build only (what a judge-built seed can give);
  launcher  a cache seeded with `cuda_utils` and the kernel's launcher (the floor: the kernel's own
            compile);
and in each, a second kernel of the same signature and one of another signature.
Run on the GPU machine:  python bench/probes/triton_cold.py [--reps 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent("""
    import json, os, sys, time
    t0 = time.perf_counter()
    out = {}
    import torch
    out["import_torch"] = time.perf_counter() - t0
    t = time.perf_counter()
    import triton, triton.language as tl
    out["import_triton"] = time.perf_counter() - t
    import triton.runtime.build as build
    builds = []
    real_build = build._build
    def timed_build(name, *a, **k):
        s = time.perf_counter()
        try:
            return real_build(name, *a, **k)
        finally:
            builds.append([name, round(time.perf_counter() - s, 4)])
    build._build = timed_build
    t = time.perf_counter()
    x = torch.randn(1 << 20, device="cuda")
    torch.cuda.synchronize()
    out["cuda_init"] = time.perf_counter() - t

    @triton.jit
    def k_relu(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(o_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)

    @triton.jit
    def k_scale(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)

    @triton.jit
    def k_axpb(x_ptr, o_ptr, a, b, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) * a + b, mask=m)

    o = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 1024),)
    for name, launch in (("first_kernel", lambda: k_relu[grid](x, o, x.numel(), BLOCK=1024)),
                         ("same_signature", lambda: k_scale[grid](x, o, x.numel(), BLOCK=1024)),
                         ("other_signature", lambda: k_axpb[grid](x, o, 2.0, 1.0, x.numel(), BLOCK=1024))):
        n0 = len(builds)
        t = time.perf_counter()
        launch()
        torch.cuda.synchronize()
        out[name] = time.perf_counter() - t
        out[name + "_builds"] = builds[n0:]
    out["triton"] = triton.__version__
    print("RESULT " + json.dumps(out))
""")


def child(cache: str, script: str) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    cp = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=300)
    for line in cp.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"child failed ({cp.returncode}): {cp.stderr[-2000:]}")


def seed_from(src: str, dst: str, names: tuple[str, ...]) -> None:
    """Copy into `dst` the cache entries of `src` that hold a build named in `names`."""
    os.makedirs(dst, exist_ok=True)
    for key in os.listdir(src):
        files = os.listdir(os.path.join(src, key))
        if any(f.startswith(n) for f in files for n in names):
            shutil.copytree(os.path.join(src, key), os.path.join(dst, key))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="triton-cold-")
    script = os.path.join(root, "child.py")  # @triton.jit needs its source in a file
    with open(script, "w") as f:
        f.write(CHILD)
    rows: dict[str, list[dict]] = {"empty": [], "utils": [], "launcher": []}
    for rep in range(args.reps):
        empty = os.path.join(root, f"empty{rep}")
        rows["empty"].append(child(empty, script))
        utils = os.path.join(root, f"utils{rep}")
        seed_from(empty, utils, ("cuda_utils",))
        rows["utils"].append(child(utils, script))
        both = os.path.join(root, f"launcher{rep}")
        seed_from(empty, both, ("cuda_utils", "__triton_launcher"))
        rows["launcher"].append(child(both, script))
    keys = ("import_torch", "import_triton", "cuda_init", "first_kernel", "same_signature", "other_signature")
    print(f"triton {rows['empty'][0]['triton']}; seconds, median of {args.reps} fresh processes")
    print(f"{'cache':>9} " + " ".join(f"{k:>15}" for k in keys))
    for mode, rs in rows.items():
        print(f"{mode:>9} " + " ".join(f"{statistics.median(r[k] for r in rs):15.3f}" for k in keys))
    print("C builds in the first launch (empty cache):", rows["empty"][0]["first_kernel_builds"])
    print("C builds of another signature:", rows["empty"][0]["other_signature_builds"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
