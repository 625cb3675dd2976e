"""Issue 14 target 3: where the seconds of one `drkernel eval` go.

Three views of one small problem (drkernel/examples/relu_scale):
  shell     `drkernel eval` from the shell, twice (the second finds the device peaks cached);
  startup   fresh interpreters: `python -c pass`, `import torch`, `import triton`, `import drkernel.cli`;
  timeline  the same evaluation in this process, with the judge's own steps timed where they start
            and end (fork server, comparison process, sandboxes ready, isolation probe, evaluation
            stages, close), so that overlapping steps show as overlapping.
Run:  python bench/eval_latency.py [--device cuda] [--json FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[1] / "drkernel" / "examples" / "relu_scale"


def wall(cmd: list[str]) -> tuple[float, int]:
    t0 = time.monotonic()
    cp = subprocess.run(cmd, capture_output=True, text=True)
    if cp.returncode != 0:
        print(f"{' '.join(cmd[:4])}...: exit {cp.returncode}\n{cp.stderr[-800:]}", file=sys.stderr)
    return time.monotonic() - t0, cp.returncode


def startup() -> dict[str, float]:
    py = sys.executable
    return {
        name: round(wall([py, "-c", code])[0], 3)
        for name, code in (
            ("python -c pass", "pass"),
            ("import torch", "import torch"),
            ("import triton", "import triton"),
            ("import drkernel.cli", "import drkernel.cli"),
            (
                "torch + cuda init",
                "import torch; torch.cuda.is_available() and torch.zeros(1, device='cuda')",
            ),
        )
    }


# `drkernel eval` with two stamps of the host's monotonic clock (the same clock in every process): when
# the interpreter reaches its first line, and when main() returns; then the interpreter's own exit.
SPLIT = (
    "import sys, time; t0 = time.monotonic(); from drkernel.cli import main; rc = main(sys.argv[1:]); "
    "sys.stderr.write(f'\\nDRK_SPLIT {t0} {time.monotonic()}\\n'); sys.exit(rc)"
)


def shell(device: str, runs: int) -> list[dict[str, Any]]:
    """Each run twice: as the console script runs it (`python -m drkernel.cli`: main(), then an
    immediate exit), and split (interpreter start, main(), and the interpreter's full exit: finalizers,
    atexit, torch's teardown)."""
    args = ["eval", str(EXAMPLE / "reference.py"), str(EXAMPLE / "kernel.py"), "--device", device]
    out: list[dict[str, Any]] = []
    for _ in range(runs):
        for mode, cmd in (("console", ["-m", "drkernel.cli"]), ("split", ["-c", SPLIT])):
            t0 = time.monotonic()
            cp = subprocess.run([sys.executable, *cmd, *args], capture_output=True, text=True)
            t1 = time.monotonic()
            if cp.returncode != 0 or "verdict   OK" not in cp.stdout:
                print(f"drkernel eval ({mode}): exit {cp.returncode}\n{cp.stdout[-400:]}\n{cp.stderr[-800:]}",
                      file=sys.stderr)
            stamps = [line.split()[1:] for line in cp.stderr.splitlines() if line.startswith("DRK_SPLIT ")]
            row: dict[str, Any] = {"mode": mode, "wall_s": round(t1 - t0, 3)}
            if stamps:
                a, b = (float(v) for v in stamps[-1])
                row |= {"start_s": round(a - t0, 3), "main_s": round(b - a, 3), "exit_s": round(t1 - b, 3)}
            out.append(row)
    return out


class Timeline:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.spans: list[tuple[str, float, float]] = []

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        @functools.wraps(fn)
        def timed(*a: Any, **k: Any) -> Any:
            start = time.monotonic()
            try:
                return fn(*a, **k)
            finally:
                self.spans.append((name, start - self.t0, time.monotonic() - self.t0))

        setattr(owner, attr, timed)


def timeline(device: str) -> dict[str, Any]:
    """The judge's steps as `drkernel eval` runs them: the fork server first, then the imports."""
    tl = Timeline()
    from drkernel.sandbox import cli as eval_cli
    from drkernel.sandbox.plumbing import process

    tl.wrap(process.Zygote, "__init__", "fork server Popen")
    tl.wrap(process.ComparisonProcess, "__init__", "comparison process Popen (prestart)")
    zygote, comparison = eval_cli._prestart(device)
    s = time.monotonic() - tl.t0
    from drkernel.sandbox import comparator, judge, pipeline
    from drkernel.sandbox.plumbing import isolation
    from drkernel.settings import default_timing_cache
    from drkernel.types import EvalRequest

    tl.spans.append(("import judge (torch, triton)", s, time.monotonic() - tl.t0))
    tl.wrap(judge, "resolve_device", "resolve_device")
    tl.wrap(judge, "_to_hide", "hidden paths")
    tl.wrap(isolation, "probe", "isolation probe")
    tl.wrap(judge, "make_comparator", "comparator (adopts the prestarted child)")
    tl.wrap(process.SandboxProcess, "__init__", "sandbox spawn (fork)")
    tl.wrap(pipeline.Evaluation, "run", "evaluation")
    tl.wrap(comparator.ProcessComparator, "compare", "comparison")
    startups: list[dict[str, Any]] = []
    ready = process.SandboxProcess.wait_ready

    def wait_ready(proc: Any) -> Any:
        start = time.monotonic()
        info = ready(proc)
        if start - proc.started_at > -1 and proc not in [x["proc"] for x in startups]:
            startups.append(
                {
                    "proc": proc,
                    "role": proc.role,
                    "seeded": proc.seeded,
                    "startup_s": info.startup_s,
                    "fork_to_ready_s": round(time.monotonic() - proc.started_at, 3),
                }
            )
        tl.spans.append((f"{proc.role} wait_ready", start - tl.t0, time.monotonic() - tl.t0))
        return info

    process.SandboxProcess.wait_ready = wait_ready  # type: ignore[method-assign]
    ref = (EXAMPLE / "reference.py").read_text()
    ker = (EXAMPLE / "kernel.py").read_text()
    s = time.monotonic() - tl.t0
    j = judge.Judge(device=device, spares=1, cache_path=default_timing_cache(), zygote=zygote,
                    comparison=comparison, refill=False)
    tl.spans.append(("Judge()", s, time.monotonic() - tl.t0))
    s = time.monotonic() - tl.t0
    result = j.evaluate(EvalRequest(reference_code=ref, kernel_code=ker))
    tl.spans.append(("Judge.evaluate", s, time.monotonic() - tl.t0))
    s = time.monotonic() - tl.t0
    j.close()
    tl.spans.append(("Judge.close", s, time.monotonic() - tl.t0))
    spans = sorted(tl.spans, key=lambda x: x[1])
    return {
        "outcome": result.outcome.value,
        "stage_s": result.stage_s,
        "wall_s": result.wall_s,
        "sandbox_startup": [{k: v for k, v in x.items() if k != "proc"} for x in startups],
        "spans": [
            {"step": n, "start_s": round(a, 3), "end_s": round(b, 3), "took_s": round(b - a, 3)}
            for n, a, b in spans
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shell-runs", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out: dict[str, Any] = {"shell_s": shell(args.device, args.shell_runs), "startup_s": startup()}
    out["timeline"] = timeline(args.device)
    print("drkernel eval from the shell (the first run also measures the device's peaks and the reference):")
    for r in out["shell_s"]:
        parts = (f"  (start {r['start_s']:.2f}, main {r['main_s']:.2f}, full exit {r['exit_s']:.2f})"
                 if "main_s" in r else "")
        print(f"  {r['mode']:>8} {r['wall_s']:6.2f} s{parts}")
    for k, v in out["startup_s"].items():
        print(f"  fresh interpreter, {k:<22} {v:6.2f} s")
    tlr = out["timeline"]
    print(f"in-process timeline ({tlr['outcome']}):")
    for sp in tlr["spans"]:
        print(f"  {sp['start_s']:7.2f} -> {sp['end_s']:7.2f}  ({sp['took_s']:6.2f} s)  {sp['step']}")
    for x in tlr["sandbox_startup"]:
        print(f"  {x['role']} sandbox (Triton seed copied: {x['seeded']}): fork to ready "
              f"{x['fork_to_ready_s']:.2f} s, inside: {x['startup_s']}")
    print("evaluation stages: " + ", ".join(f"{k} {v:.2f}s" for k, v in tlr["stage_s"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
