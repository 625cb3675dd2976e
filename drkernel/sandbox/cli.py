"""`drkernel eval REFERENCE.py KERNEL.py`: judge one candidate, print a verdict or one JSON object."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from drkernel.errors import ConfigError
from drkernel.types import EvalOptions, EvalRequest, EvalResult

__all__ = ["register", "render_verdict"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("eval", help="judge one Triton candidate against a PyTorch reference",
                       description="Judge KERNEL.py (defines ModelNew) against REFERENCE.py (KernelBench format).")  # fmt: skip
    p.add_argument("reference", type=Path, help="KernelBench-format reference (Model, get_inputs, get_init_inputs)")
    p.add_argument("kernel", type=Path, help="candidate source defining ModelNew with @triton.jit kernels")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object (the result contract)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda when present)")
    p.add_argument("--timeout", type=float, default=180.0, help="wall-clock limit in seconds (default 180)")
    p.add_argument("--trials", type=int, default=None, help="correctness trials (default 5)")
    p.add_argument("--perf-trials", type=int, default=None, help="timed calls (default 100 on GPU, 3 on CPU)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls before timing (default 3)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: per dtype)")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: per dtype)")
    p.add_argument("--reference-backend", choices=["eager", "compile"], default="eager",
                   help="time the reference eagerly or wrapped in torch.compile")  # fmt: skip
    p.add_argument("--preset", choices=["default", "paper"], default="default",
                   help="'paper': 5 trials, atol=rtol=1e-2 for every dtype, the paper's reward")  # fmt: skip
    p.add_argument("--reward", choices=["paper", "released", "eval", "correctness_speedup"], default=None,
                   help="reward formula (default: paper)")  # fmt: skip
    p.add_argument("--seed", type=int, default=None, help="fix trial seeds (default: fresh per run)")
    p.add_argument("--no-profile", action="store_true", help="skip the profiling window (coverage null)")
    p.add_argument("--memory-limit-mb", type=int, default=None, help="host memory limit of the sandbox")
    p.add_argument("--cache", type=Path, default=None, help="reference timing cache file")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="run the candidate without sandbox isolation (your own code only; the result "
                        "then says \"isolation\": \"none\"); without it the judge refuses to start where "
                        "it cannot isolate sandboxes")
    p.add_argument("--launch-preroll-us", type=float, default=None,
                   help="GPU: keep the device busy this long before each timed call so that host launch "
                        "overhead is not timed (default 0: off)")  # fmt: skip
    p.add_argument("--shape", action="append", default=[], metavar="SNIPPET",
                   help="also check correctness at other sizes: Python assignments replacing the reference's "
                        "module-level size constants, e.g. --shape 'batch_size = 3; dim = 100' (repeatable); "
                        "never changes the verdict")  # fmt: skip
    p.set_defaults(func=run)


def _options(args: argparse.Namespace) -> EvalOptions:
    base = EvalOptions.paper() if args.preset == "paper" else EvalOptions()
    changes: dict[str, object] = {"device": args.device, "timeout_s": args.timeout,
                                  "reference_backend": args.reference_backend, "seed": args.seed,
                                  "profile": not args.no_profile}  # fmt: skip
    for field, value in (("num_correct_trials", args.trials), ("num_perf_trials", args.perf_trials),
                         ("num_warmup", args.warmup), ("atol", args.atol), ("rtol", args.rtol),
                         ("reward_preset", args.reward), ("memory_limit_mb", args.memory_limit_mb),
                         ("launch_preroll_us", args.launch_preroll_us)):  # fmt: skip
        if value is not None:
            changes[field] = value
    return base.replace(**changes)


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} file {path}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from drkernel.sandbox.judge import Judge, default_cache_path

    reference = _read(args.reference, "reference")
    kernel = _read(args.kernel, "kernel")
    options = _options(args)
    if "class Model" not in reference or "def get_inputs" not in reference:
        raise ConfigError(f"{args.reference} is not KernelBench format (needs class Model and get_inputs)")
    for snippet in args.shape:
        try:
            compile(snippet, "--shape", "exec")
        except SyntaxError as exc:
            raise ConfigError(f"--shape {snippet!r} is not Python: {exc.msg}") from None
    request = EvalRequest(reference_code=reference, kernel_code=kernel, options=options,
                          problem_name=args.reference.stem, shape_variants=tuple(args.shape))  # fmt: skip
    with Judge(device=options.device, spares=1, cache_path=args.cache or default_cache_path(),
               memory_limit_mb=options.memory_limit_mb, insecure=args.insecure) as judge:  # fmt: skip
        result = judge.evaluate(request)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), allow_nan=False, default=str) + "\n")
    else:
        sys.stdout.write(render_verdict(result) + "\n")
    return 0


def _fmt(value: float | None, unit: str = "", digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}{unit}"


def render_verdict(r: EvalResult) -> str:
    """A short human-readable verdict."""
    dev = r.device
    where = f"{dev.name} ({'Triton interpreter: timings are not GPU timings' if dev.interpreter else 'GPU'})" if dev else "?"
    lines = [f"verdict   {r.outcome.value.upper()}  (status {r.status.value}, reward {r.reward:.3f})",
             f"device    {where}",
             f"compiled  {r.compiled}   correct {r.correct}"]  # fmt: skip
    if r.hacks:
        lines.append("hacks     " + ", ".join(f"{c}: {r.hack_details.get(c, '')}" for c in r.hacks))
    if r.error:
        lines.append(f"error     {r.error.kind}: {r.error.message.splitlines()[0] if r.error.message else ''}")
    if r.trials:
        ok = sum(t.passed for t in r.trials)
        worst = next((t for t in r.trials if not t.passed), None)
        lines.append(f"trials    {ok}/{len(r.trials)} passed" + (f"; first failure: {worst.issue}" if worst else ""))
    if r.kernel_ms is not None:
        lines.append(f"timing    kernel {_fmt(r.kernel_ms, ' ms')}  reference {_fmt(r.reference_ms, ' ms')}  "
                     f"speedup {_fmt(r.speedup, 'x')}")  # fmt: skip
    lines.append(f"coverage  {_fmt(r.coverage)}  (share of device time in the submission's kernels)")
    for warning in r.warnings:
        lines.append(f"warning   {warning}")
    if r.shape_variants_total is not None:
        lines.append(f"shapes    {r.shape_variants_passed}/{r.shape_variants_total} other sizes passed"
                     + "".join(f"\n          {issue[:200]}" for issue in r.shape_variant_issues))  # fmt: skip
    if r.kernels:
        top = ", ".join(f"{k.name[:40]}{'*' if k.own else ''} {k.device_us:.0f}us" for k in r.kernels[:5])
        lines.append(f"kernels   {top}   (* = submission's own)")
    return "\n".join(lines)
