"""`drkernel eval REFERENCE.py KERNEL.py`: judge one candidate, print a verdict or one JSON object."""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import os
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from drkernel.errors import ConfigError
from drkernel.helpfmt import DefaultsHelpFormatter
from drkernel.settings import MAX_MEMORY_LIMIT_MB, judge_settings_from_env
from drkernel.types import (
    MAX_SEED,
    MAX_SOURCE_BYTES,
    MAX_TIMEOUT_S,
    REWARD_PRESET_NAMES,
    EvalOptions,
    EvalRequest,
    EvalResult,
)

if TYPE_CHECKING:
    from drkernel.sandbox.plumbing.process import ComparisonProcess, Zygote

__all__ = ["kernel_line", "register", "render_verdict"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("eval", help="judge one Triton candidate against a PyTorch reference",
                       description="Judge KERNEL.py (defines ModelNew) against REFERENCE.py "
                                   "(KernelBench format).",
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("reference", type=Path,
                   help="KernelBench-format reference (Model, get_inputs, get_init_inputs)")
    p.add_argument("kernel", type=Path, help="candidate source defining ModelNew with @triton.jit kernels; "
                                             "- reads it from stdin (a model's answer piped in)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object (the result contract)")
    p.add_argument("-v", "--verbose", dest="eval_verbose", action="store_true",
                   help="also print the traceback, every trial, stage timings and what the candidate "
                        "printed")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda when present)")
    p.add_argument("--timeout", type=float, default=180.0, help="wall-clock limit in seconds")
    p.add_argument("--trials", type=int, default=None, help="correctness trials (default 5)")
    p.add_argument("--perf-trials", type=int, default=None, help="timed calls (default 100 on GPU, 3 on CPU)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls before timing (default 3)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: per dtype)")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: per dtype)")
    p.add_argument("--reference-backend", choices=["eager", "compile"], default="eager",
                   help="time the reference eagerly or wrapped in torch.compile")
    p.add_argument("--preset", choices=["default", "paper"], default="default",
                   help="'paper': 5 trials, atol=rtol=1e-2 for every dtype, the paper's reward")
    p.add_argument("--reward", choices=REWARD_PRESET_NAMES, default=None,
                   help="reward formula (default: paper)")
    p.add_argument("--seed", type=int, default=None, help="fix trial seeds (default: fresh per run)")
    p.add_argument("--paper-timing", action="store_true",
                   help="also time both sides the authors' way (warm-up, then 10 calls each timed alone; "
                        "means to 3 significant digits); never changes the verdict")
    p.add_argument("--no-profile", action="store_true", help="skip the profiling window (coverage null)")
    p.add_argument("--memory-limit-mb", type=int, default=None,
                   help="host memory limit of each sandbox, in MiB "
                        f"(default: {EvalOptions().memory_limit_mb})")
    p.add_argument("--cache", type=Path, default=None, metavar="FILE",
                   help="reference timing cache file (default: "
                        "$XDG_CACHE_HOME/drkernel/reference_timings.sqlite where that is set, "
                        "else ~/.cache/drkernel/reference_timings.sqlite; where that "
                        "cannot be made, a warning and times kept in memory)")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="run the candidate without sandbox isolation (your own code only; the result "
                        "then says \"isolation\": \"none\"); without it the judge refuses to start where "
                        "it cannot isolate sandboxes (default: off; DRKERNEL_INSECURE=1 turns it on)")
    p.add_argument("--launch-preroll-us", type=float, default=None,
                   help="GPU: keep the device busy this long before each timed call so that host launch "
                        "overhead is not timed (default 0: off)")
    p.add_argument("--shape", action="append", default=[], metavar="SNIPPET",
                   help="also check correctness at other sizes: Python assignments replacing the reference's "
                        "module-level size constants, e.g. --shape 'batch_size = 3; dim = 100' (repeatable); "
                        "never changes the verdict")
    p.set_defaults(func=run)


def _options(args: argparse.Namespace) -> EvalOptions:
    base = EvalOptions.paper() if args.preset == "paper" else EvalOptions()
    changes: dict[str, object] = {"timeout_s": args.timeout,
                                  "reference_backend": args.reference_backend, "seed": args.seed,
                                  "profile": not args.no_profile}
    if args.paper_timing:
        changes["paper_timing"] = True
    for field, value in (("num_correct_trials", args.trials), ("num_perf_trials", args.perf_trials),
                         ("num_warmup", args.warmup), ("atol", args.atol), ("rtol", args.rtol),
                         ("reward_preset", args.reward), ("memory_limit_mb", args.memory_limit_mb),
                         ("launch_preroll_us", args.launch_preroll_us)):
        if value is not None:
            changes[field] = value
    return base.replace(**changes)


# (flag, lowest, highest): the range each numeric flag accepts (the judge checks the same fields)
_RANGES = (
    ("--trials", 1, 100),
    ("--perf-trials", 1, 10000),
    ("--warmup", 0, 10000),
    ("--atol", 0.0, math.inf),
    ("--rtol", 0.0, math.inf),
    ("--memory-limit-mb", 64, MAX_MEMORY_LIMIT_MB),
    ("--launch-preroll-us", 0.0, 1000.0),
    ("--seed", 0, MAX_SEED),
)


def _show(number: float) -> str:
    """A flag's value or bound as a user reads it: 2**63 - 1 for 9223372036854775807, else %g (an int
    past a float's range too: `--seed 1e+400`, which was a traceback)."""
    if isinstance(number, int) and number >= 1 << 20:
        for power, text in ((number, ""), (number + 1, " - 1")):
            if power & (power - 1) == 0:
                return f"2**{power.bit_length() - 1}{text}"
    try:
        return f"{number:g}"
    except OverflowError:
        return f"{Decimal(number).normalize():g}"


def _check_flags(args: argparse.Namespace) -> None:
    """Each bad value is a usage error that names its flag (not the option field behind it)."""
    if not 0 < args.timeout <= MAX_TIMEOUT_S:
        raise ConfigError(f"--timeout {args.timeout:g}: must be a number of seconds > 0 "
                          f"and at most {MAX_TIMEOUT_S:g}")
    for flag, low, high in _RANGES:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is None:
            continue
        if not ((isinstance(value, int) or math.isfinite(value)) and low <= value <= high):
            bound = f">= {_show(low)}" if high == math.inf else f"between {_show(low)} and {_show(high)}"
            raise ConfigError(f"{flag} {_show(value)}: must be {bound}")


def _assigned(tree: ast.Module) -> set[str]:
    """The names a module's top-level statements assign."""
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _check_shape(snippet: str, reference: str, path: Path) -> None:
    """A --shape is Python that sets at least one of the reference's module-level names: one that sets
    none (`batch = 3` for `batch_size = 3`) changed nothing, and its variant was counted as passed."""
    try:
        names = _assigned(ast.parse(snippet, "--shape"))
    except SyntaxError as exc:
        raise ConfigError(f"--shape {snippet!r} is not Python: {exc.msg}") from None
    try:
        known = _assigned(ast.parse(reference))
    except SyntaxError:
        return  # the reference's own error is the judge's to report
    if not names & known:
        constants = ", ".join(sorted(n for n in known if not n.startswith("_"))) or "none"
        raise ConfigError(f"--shape {snippet!r} sets no module-level name of {path} (it has: {constants})")


def _read(path: Path, what: str) -> str:
    """A source file's UTF-8 text, less the byte-order mark an editor may put first: Python runs such a
    file, and the problem loaders read references the same way (a kernel's BOM was its compile_error)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{what} file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {path}: {exc}") from None
    return _decode(data, f"{what} file {path}")


def _read_stdin() -> str:
    """The kernel's source from stdin (`drkernel eval ref.py -`: a model's answer piped in), read as a
    file's is (_decode)."""
    try:
        data = sys.stdin.buffer.read(MAX_SOURCE_BYTES + 1)
    except (AttributeError, OSError, ValueError) as exc:  # no stdin, or a closed one
        raise ConfigError(f"cannot read the kernel on stdin: {exc}") from None
    return _decode(data, "the kernel on stdin")


def _decode(data: bytes, where: str) -> str:
    """`data` (read up to one byte past the limit) as UTF-8 less a byte-order mark; at most the judge's
    source limit."""
    if len(data) > MAX_SOURCE_BYTES:
        raise ConfigError(f"{where} is too large: the judge takes sources of at most "
                          f"{MAX_SOURCE_BYTES >> 20} MiB (the server's limit too)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read {where}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    _check_flags(args)
    from_env = judge_settings_from_env(insecure=args.insecure or None)  # a bad variable: before any start
    # The fork server imports torch and triton (seconds); it starts first, so that this process's
    # own imports of them overlap with its.
    zygote, comparison = _prestart(args.device)
    from drkernel.sandbox.judge import Judge
    from drkernel.sandbox.plumbing.process import SandboxFailure

    reference = _read(args.reference, "reference")
    kernel = _read_stdin() if str(args.kernel) == "-" else _read(args.kernel, "kernel")
    options = _options(args)
    missing = [what for what, text in (("class Model", "class Model"), ("get_inputs()", "def get_inputs"),
                                       ("get_init_inputs()", "def get_init_inputs"))
               if text not in reference]
    if missing:
        raise ConfigError(f"{args.reference} is not KernelBench format: it defines no "
                          f"{' and no '.join(missing)} (a reference defines class Model, get_inputs() and "
                          "get_init_inputs())")
    # a reference that does not parse, here on the host: it started a judge to come back infra_error
    from drkernel.problems.reference import validate_reference_source

    validate_reference_source(reference, str(args.reference), options.entry_point)
    for snippet in args.shape:
        _check_shape(snippet, reference, args.reference)
    request = EvalRequest(reference_code=reference, kernel_code=kernel, options=options,
                          problem_name=args.reference.stem, shape_variants=tuple(args.shape))
    cache = _timing_cache(args.cache)
    try:
        config = from_env.replace(spares=1, refill=False, cache_path=cache,
                                  memory_limit_mb=options.memory_limit_mb)
        with Judge.from_config(config, args.device, zygote=zygote, comparison=comparison) as judge:
            result = judge.evaluate(request)
    except SandboxFailure as exc:  # the judge's own machinery, never the candidate's doing
        print(f"drkernel eval: the judge could not start its sandboxes: {exc}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), allow_nan=False, default=str) + "\n")
    else:
        verbose = bool(getattr(args, "eval_verbose", False) or getattr(args, "verbose", False))
        sys.stdout.write(render_verdict(result, verbose=verbose) + "\n")
    return 0


def _timing_cache(flag: Path | None) -> str | None:
    """The reference-timing cache's file, opened here before any judge starts: a --cache that cannot be
    opened is a usage error; the default one, which the user never asked for, a warning and times kept
    in memory (None) where it cannot be made (an unwritable home stopped the command after its judge
    had started)."""
    from drkernel.sandbox.refcache import ReferenceTimingCache
    from drkernel.settings import default_timing_cache

    if flag is not None:
        ReferenceTimingCache(flag).close()
        return str(flag)
    try:
        path = default_timing_cache()
        ReferenceTimingCache(path).close()
    except (ConfigError, RuntimeError) as exc:  # RuntimeError: Path.home() found no home
        print(f"drkernel eval: warning: {exc}; reference timings are kept in memory for this run "
              "(--cache FILE keeps them in another file)", file=sys.stderr)
        return None
    return path


def _prestart(device: str | None) -> tuple[Zygote | None, ComparisonProcess | None]:
    """A fork server for the device the judge will most likely resolve, and on a GPU its comparison
    child (`Judge` checks both, and starts its own where one does not fit); None where one cannot
    start here. Both import torch; started first, they do it while this process does."""
    from drkernel.sandbox.plumbing.process import ComparisonProcess, Zygote

    if device is None:
        device = ("cuda" if os.path.exists("/dev/nvidiactl") and os.environ.get("CUDA_VISIBLE_DEVICES") != ""
                  else "cpu")
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        return None, None  # a bad spelling: Judge says what is wrong with it
    try:
        zygote = Zygote(device)
    except OSError:
        return None, None
    comparison = None
    if device.startswith("cuda") and os.path.exists("/dev/nvidiactl"):
        with contextlib.suppress(OSError):  # the judge resolves "cuda" to "cuda:0"
            comparison = ComparisonProcess("cuda:0" if device == "cuda" else device)
    return zygote, comparison


def _fmt(value: float | None, unit: str = "", digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}{unit}"


_KERNEL_FRAME = re.compile(r'File "[^"]*submission\.py", line (\d+)')


def kernel_line(traceback: str | None) -> tuple[int, str] | None:
    """(line number, source text) of the innermost traceback frame in the submitted kernel, if any."""
    if not traceback:
        return None
    lines = traceback.splitlines()
    found = None
    for i, line in enumerate(lines):
        m = _KERNEL_FRAME.search(line)
        if m:
            text = (lines[i + 1].strip()
                    if i + 1 < len(lines) and not lines[i + 1].lstrip().startswith("File ") else "")
            found = (int(m.group(1)), text)
    return found


def render_verdict(r: EvalResult, verbose: bool = False) -> str:
    """A short human-readable verdict; `verbose` adds the traceback, trials, stage times and output."""
    dev = r.device
    where = (f"{dev.name} ({'Triton interpreter: timings are not GPU timings' if dev.interpreter else 'GPU'})"
             if dev else "?")
    lines = [f"verdict   {r.outcome.value.upper()}  (status {r.status.value}, reward {r.reward:.3f})",
             f"device    {where}",
             f"compiled  {r.compiled}   correct {r.correct}"]
    if r.hacks:
        lines.append("hacks     " + ", ".join(f"{c}: {r.hack_details.get(c, '')}" for c in r.hacks))
    if r.error:
        lines.append(f"error     {r.error.kind}: "
                     f"{r.error.message.splitlines()[0] if r.error.message else ''}")
        at = kernel_line(r.error.traceback)
        if at is not None:
            lines.append(f"          at kernel line {at[0]}" + (f": {at[1]}" if at[1] else ""))
    if r.trials:
        ok = sum(t.passed for t in r.trials)
        worst = next((t for t in r.trials if not t.passed), None)
        lines.append(f"trials    {ok}/{len(r.trials)} passed"
                     + (f"; first failure: {worst.issue}" if worst else ""))
    if r.kernel_ms is not None:
        lines.append(f"timing    kernel {_fmt(r.kernel_ms, ' ms')}  reference {_fmt(r.reference_ms, ' ms')}  "
                     f"speedup {_fmt(r.speedup, 'x')}")
    if r.paper_timing is not None:
        p = r.paper_timing
        lines.append(f"paper     kernel {p.kernel_ms:g} ms  reference {p.reference_ms:g} ms  speedup "
                     f"{_fmt(p.speedup, 'x')}  (the authors' way: {p.calls} calls each timed alone)")
    lines.append(f"coverage  {_fmt(r.coverage)}  (share of device time in the submission's kernels)")
    for warning in r.warnings:
        lines.append(f"warning   {warning}")
    if r.shape_variants_total is not None:
        lines.append(f"shapes    {r.shape_variants_passed}/{r.shape_variants_total} other sizes passed"
                     + "".join(f"\n          {issue[:200]}" for issue in r.shape_variant_issues))
    if r.kernels:
        top = ", ".join(f"{k.name[:40]}{'*' if k.own else ''} {k.device_us:.0f}us" for k in r.kernels[:5])
        lines.append(f"kernels   {top}   (* = submission's own)")
    if verbose:
        lines += _details(r)
    return "\n".join(lines)


def _details(r: EvalResult) -> list[str]:
    out = []
    for t in r.trials:
        diffs = (f"max abs {_fmt(t.max_abs_diff)}, mean abs {_fmt(t.mean_abs_diff)}, "
                 f"max rel {_fmt(t.max_rel_diff)}, rel L2 {_fmt(t.rel_l2)}")
        out.append(f"trial     seed {t.seed}: {'passed' if t.passed else 'FAILED'} ({diffs})"
                   + (f": {t.issue}" if t.issue else ""))
    if r.stage_s:
        out.append("stages    " + ", ".join(f"{k} {v:.2f}s" for k, v in r.stage_s.items()))
    if r.error and r.error.traceback:
        out.append("traceback")
        out += [f"    {line}" for line in r.error.traceback.rstrip().splitlines()]
    if r.sandbox_output.strip():
        out.append("candidate printed")
        out += [f"    {line}" for line in r.sandbox_output.rstrip().splitlines()[-40:]]
    return out
