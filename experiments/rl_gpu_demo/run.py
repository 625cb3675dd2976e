"""RL where the judge's measured rewards decide: a tiny model learns which kernel variant to submit.

A randomly initialised 2-layer model whose vocabulary has one token per (problem, variant) kernel
(experiments/rl_gpu_demo/problems.py: honest, slow, lazy, broken, hacked) is trained with drkernel's
Trainer (multi-turn, PRS, MRS, group filter) against the real judge; TRLOO vs GRPO on the same seeds.
Each distinct kernel is judged once (cached and shared by all runs, so every run sees the same
measured rewards). Writes curves.png, results.md and results.json into --out.

    python experiments/rl_gpu_demo/run.py --device cuda --out docs/rl_gpu_demo      # one H200, ~10 min
    python experiments/rl_gpu_demo/run.py --device cpu --steps 3 --seeds 0 --out /tmp/demo  # plumbing
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from problems import demo_problems, variants

from drkernel.agent.extraction import extract_code
from drkernel.agent.trajectories import load_trajectories
from drkernel.executors.caching import CachingExecutor
from drkernel.executors.local import LocalExecutor
from drkernel.recipes import debug_cpu
from drkernel.rl.config import TinyModelConfig, apply_overrides
from drkernel.rl.tiny import build_tiny, macro_text
from drkernel.rl.trainer import Trainer
from drkernel.types import EvalOptions, EvalRequest

VARIANTS = ("honest", "slow", "lazy", "broken", "hacked")


class SharedExecutor:
    """The cached judge, shared by every run: closing a run does not close it."""

    def __init__(self, inner: CachingExecutor) -> None:
        self.inner = inner

    def evaluate(self, requests: list[EvalRequest]) -> list:
        return self.inner.evaluate(requests)

    def close(self) -> None:
        pass


def options(device: str) -> EvalOptions:
    if device == "cpu":
        return EvalOptions(num_correct_trials=2, num_perf_trials=1, num_warmup=1)
    return EvalOptions()  # 100 timed calls, profiling on: speedup and PR are measured


def measure_variants(executor: SharedExecutor, problems, opts: EvalOptions) -> dict:
    """Judge every variant once (this fills the shared cache) and return the table of verdicts."""
    table = {}
    for p in problems:
        for name, src in variants(p.name).items():
            code = extract_code(macro_text(src), p.entry_point).code  # exactly what a rollout submits
            assert code is not None
            r = executor.evaluate([EvalRequest(reference_code=p.reference_code, kernel_code=code,
                                               options=opts)])[0]
            table[f"{p.name}/{name}"] = {
                "outcome": r.outcome.value, "correct": r.correct, "hacks": r.hacks,
                "speedup": r.speedup, "coverage": r.coverage, "reward": r.reward,
            }  # fmt: skip
            print(f"  {p.name:10s} {name:7s} {r.outcome.value:14s} speedup={r.speedup} PR={r.coverage} "
                  f"reward={r.reward:.3f}", flush=True)
    return table


def run_config(args: argparse.Namespace, estimator: str, seed: int, opts: EvalOptions):
    cfg = apply_overrides(debug_cpu(), [
        f"rl.advantage={estimator}", f"trainer.seed={seed}", f"trainer.steps={args.steps}",
        f"trainer.prompts_per_step={2}", f"rollout.n={args.n}", f"rollout.max_turns={args.turns}",
        "rollout.max_new_tokens=3", "rollout.cache_evaluations=false", "trainer.validate_every=0",
        f"trainer.save_every={args.steps}", f"optim.lr={args.lr}", "log.tensorboard=false",
        f"model.device={args.device}", "reward=paper",
    ])  # fmt: skip
    from dataclasses import replace

    return replace(cfg, eval=opts)


def variant_of(code: str | None, sources: dict[str, str]) -> str:
    if code is None:
        return "no_code"
    for name, src in sources.items():
        if code.strip() == src.strip():
            return name
    return "other"


def choice_rates(run_dir: Path, problems, turns: int) -> list[dict[str, float]]:
    """Per step: share of last-turn submissions that are each variant."""
    sources = {p.name: variants(p.name) for p in problems}
    out = []
    for f in sorted((run_dir / "rollouts").glob("step_*.jsonl")):
        counts: dict[str, int] = {}
        trajs = load_trajectories(f)
        for t in trajs:
            last = t.turns[-1] if t.turns else None
            v = variant_of(last.code if last else None, sources[t.problem])
            counts[v] = counts.get(v, 0) + 1
        out.append({k: counts.get(k, 0) / max(len(trajs), 1) for k in (*VARIANTS, "no_code", "other")})
    return out


def one_run(args, estimator, seed, problems, executor, opts, out: Path) -> dict:
    import torch

    run_dir = out / "runs" / f"{estimator}_seed{seed}"
    shutil.rmtree(run_dir, ignore_errors=True)
    tiny = TinyModelConfig(hidden_size=64, layers=2, heads=4, max_positions=16384,
                           filler_words=("relu_scale", "add_mul", "ok", "kernel"))
    model, tok = build_tiny(tiny, {p.name: variants(p.name) for p in problems}, seed=seed)
    cfg = run_config(args, estimator, seed, opts)
    t0 = time.time()
    with Trainer(cfg, run_dir, model=model.to(torch.device(args.device)), tokenizer=tok, problems=problems,
                 validation=[], executor=executor) as trainer:
        metrics = trainer.fit()
    rates = choice_rates(run_dir, problems, args.turns)
    print(f"  {estimator} seed {seed}: {time.time() - t0:.0f}s, reward {metrics[0]['reward/mean']:.2f} -> "
          f"{metrics[-1]['reward/mean']:.2f}, honest {rates[0]['honest']:.2f} -> {rates[-1]['honest']:.2f}",
          flush=True)
    return {"metrics": metrics, "choices": rates, "seconds": time.time() - t0}


def _mean_std(rows: list[list[float]]) -> tuple[list[float], list[float]]:
    cols = list(zip(*rows, strict=True))
    return [statistics.fmean(c) for c in cols], [statistics.pstdev(c) for c in cols]


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    series = [("reward/mean", "mean turn reward (paper reward)"), ("reward/last_turn", "last-turn reward")]
    for est, runs in results.items():
        for ax, (key, title) in zip(axes[:2], series, strict=True):
            mean, std = _mean_std([[m[key] for m in r["metrics"]] for r in runs.values()])
            x = range(1, len(mean) + 1)
            ax.plot(x, mean, label=est)
            ax.fill_between(x, [a - b for a, b in zip(mean, std)], [a + b for a, b in zip(mean, std)],
                            alpha=0.2)
            ax.set_title(title)
        mean, _ = _mean_std([[c["honest"] for c in r["choices"]] for r in runs.values()])
        axes[2].plot(range(1, len(mean) + 1), mean, label=est)
        axes[2].set_title("share of last turns submitting the honest kernel")
    for ax in axes:
        ax.set_xlabel("step")
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)


def write_table(results: dict, measured: dict, args: argparse.Namespace, out: Path) -> None:
    k = max(1, min(5, args.steps // 4))
    lines = [
        "# RL GPU demo: a tiny model learns which kernel the judge rewards", "",
        (f"device `{args.device}`, {args.steps} steps, 2 prompts x {args.n} samples x {args.turns} turns, "
         f"seeds {args.seeds}, lr {args.lr}."), "",
        "## Judge verdicts of the variants (each judged once, shared by all runs)", "",
        "| problem/variant | outcome | speedup | PR | reward |", "|---|---|---|---|---|",
    ]  # fmt: skip
    for key, v in measured.items():
        sp = "-" if v["speedup"] is None else f"{v['speedup']:.3f}"
        pr = "-" if v["coverage"] is None else f"{v['coverage']:.3f}"
        lines.append(f"| {key} | {v['outcome']} | {sp} | {pr} | {v['reward']:.3f} |")
    lines += ["", f"## Learning (mean ± std over seeds; 'final' = mean of the last {k} steps)", "",
              ("| estimator | reward step 1 | final reward | final last-turn reward | honest share step 1 | "
               "final honest share |"), "|---|---|---|---|---|---|"]  # fmt: skip
    for est, runs in results.items():
        def stat(fn, runs=runs):
            vals = [fn(r) for r in runs.values()]
            return f"{statistics.fmean(vals):.3f} ± {statistics.pstdev(vals):.3f}"

        lines.append("| " + " | ".join([
            est,
            stat(lambda r: r["metrics"][0]["reward/mean"]),
            stat(lambda r: statistics.fmean(m["reward/mean"] for m in r["metrics"][-k:])),
            stat(lambda r: statistics.fmean(m["reward/last_turn"] for m in r["metrics"][-k:])),
            stat(lambda r: r["choices"][0]["honest"]),
            stat(lambda r: statistics.fmean(c["honest"] for c in r["choices"][-k:])),
        ]) + " |")  # fmt: skip
    (out / "results.md").write_text("\n".join(lines) + "\n")


def save(results: dict, measured: dict, args: argparse.Namespace, out: Path) -> None:
    (out / "results.json").write_text(json.dumps({"measured": measured, "args": vars(args), "results": {
        est: {str(s): {"choices": r["choices"], "metrics": r["metrics"], "seconds": r["seconds"]}
              for s, r in runs.items()} for est, runs in results.items()}},
        indent=1, default=str))
    plot(results, out)
    write_table(results, measured, args, out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--estimators", default="trloo,grpo")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--out", default="docs/rl_gpu_demo")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    opts = options(args.device)
    problems = demo_problems("gpu" if args.device == "cuda" else "cpu")
    judge_device = "cuda:0" if args.device == "cuda" else "cpu"
    cache_path = out / "eval_cache.jsonl"
    cache_path.unlink(missing_ok=True)
    inner = CachingExecutor(LocalExecutor(LocalExecutor.Config(devices=(judge_device,))), cache_path)
    executor = SharedExecutor(inner)
    t0 = time.time()
    try:
        print("judging the variants:", flush=True)
        measured = measure_variants(executor, problems, opts)
        results: dict = {}
        for seed in seeds:  # seed-major: an interrupted run still has both estimators on some seeds
            for est in args.estimators.split(","):
                results.setdefault(est, {})[seed] = one_run(args, est, seed, problems, executor, opts, out)
            save(results, measured, args, out)
    finally:
        inner.close()
    print((out / "results.md").read_text())
    print(f"total {time.time() - t0:.0f}s; judge calls {inner.misses}, cache hits {inner.hits}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
