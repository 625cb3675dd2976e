"""TRLOO vs GRPO vs RLOO on a synthetic multi-turn task with sparse rewards (pure torch, CPU).

The task: each prompt hides a code of L symbols out of V. A turn answers a full code and earns 1 only
when every symbol is right (sparse); the feedback marks which positions were right, so later turns can
repair earlier ones. The policy is tabular softmax: for each (prompt, position) one distribution for the
first turn and one per (previous symbol, was-it-right) for later turns. Every step samples N rollouts
of T turns for a batch of prompts and makes one on-policy update with drkernel.rl (void-turn mask,
reward-to-go, advantages, clipped loss). Success probabilities per turn are computed exactly.

    python experiments/trloo_vs_grpo/run.py            # full run, writes docs/rl_experiment.{md,png}
    python experiments/trloo_vs_grpo/run.py --quick    # 2 seeds, fewer steps, prints only

Owner: the RL core (issue 4). Depends on drkernel; nothing in drkernel imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from drkernel.rl import (
    AdvantageConfig,
    LossConfig,
    compute_advantages,
    policy_loss,
    reward_to_go,
    void_turn_mask,
)

METHODS = {
    "TRLOO": AdvantageConfig(estimator="trloo"),
    "GRPO": AdvantageConfig(estimator="grpo"),  # the paper's GRPO: mean baseline, no std
    "GRPO+std": AdvantageConfig(estimator="grpo", grpo_scale_by_std=True),  # verl's default GRPO
    "RLOO (traj.)": AdvantageConfig(estimator="rloo"),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Task:
    name: str
    vocab: int
    length: int
    prompts: int = 16
    turns: int = 3

    @property
    def chance(self) -> float:
        return float(self.vocab) ** -self.length


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    optimizer: str = "adam"
    lr: float = 0.05
    steps: int = 300
    prompts_per_step: int = 8
    rollouts: int = 8  # N, the group size at turn 1
    eval_every: int = 5
    threshold: float = 0.5  # steps-to-threshold on the last turn's success probability


TASKS = (
    Task(name="common (chance 1/16 per turn)", vocab=4, length=2),
    Task(name="rare (chance 1/216 per turn)", vocab=6, length=3),
)


class TabularPolicy(torch.nn.Module):
    """logits[prompt, position, context, symbol]; context 0 = first turn, 1 + 2*prev + hit later."""

    def __init__(self, task: Task) -> None:
        super().__init__()
        self.task = task
        self.logits = torch.nn.Parameter(
            torch.zeros(task.prompts, task.length, 1 + 2 * task.vocab, task.vocab)
        )

    def log_probs(self, prompt: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """[E, L, V] log-probabilities for episodes of `prompt` [E] in `context` [E, L]."""
        pos = torch.arange(self.task.length).expand_as(context)
        return self.logits[prompt.view(-1, 1), pos, context].log_softmax(-1)

    @torch.no_grad()
    def success_by_turn(self, codes: torch.Tensor) -> torch.Tensor:
        """Exact P(success at turn t) per prompt [P, T]: positions are independent Markov chains."""
        v = self.task.vocab
        probs = self.logits.softmax(-1)  # [P, L, C, V]
        dist = probs[:, :, 0]  # [P, L, V] distribution of the first answer
        out = []
        prev = torch.arange(v)
        for _ in range(self.task.turns):
            out.append(dist.gather(2, codes.unsqueeze(2)).squeeze(2).prod(1))
            hit = (prev.view(1, 1, v) == codes.unsqueeze(2)).long()  # [P, L, V]
            ctx = 1 + 2 * prev.view(1, 1, v) + hit
            trans = probs.gather(2, ctx.unsqueeze(3).expand(-1, -1, -1, v))  # [P, L, V_prev, V_next]
            dist = (dist.unsqueeze(3) * trans).sum(2)
        return torch.stack(out, 1)


def rollout(policy: TabularPolicy, codes: torch.Tensor, prompt: torch.Tensor, gen: torch.Generator):
    """Sample T turns for episodes of `prompt` [E]: (rewards [E, T], tokens [E, T, L], contexts [E, T, L])."""
    e, task = prompt.shape[0], policy.task
    context = torch.zeros(e, task.length, dtype=torch.long)
    rewards, tokens, contexts = [], [], []
    with torch.no_grad():
        for _ in range(task.turns):
            probs = policy.log_probs(prompt, context).exp().reshape(-1, task.vocab)
            tok = torch.multinomial(probs, 1, generator=gen).view(e, task.length)
            hit = tok == codes[prompt]
            rewards.append(hit.all(1).double())
            tokens.append(tok)
            contexts.append(context)
            context = 1 + 2 * tok + hit.long()
    return torch.stack(rewards, 1), torch.stack(tokens, 1), torch.stack(contexts, 1)


def train_step(policy, opt, codes, method: AdvantageConfig, run: Run, gen: torch.Generator) -> float:
    task = policy.task
    prompts = torch.randperm(task.prompts, generator=gen)[: run.prompts_per_step]
    prompt = prompts.repeat_interleave(run.rollouts)  # [E]
    rewards, tokens, contexts = rollout(policy, codes, prompt, gen)
    valid = void_turn_mask(rewards)  # docs/paper_spec.md §5.4
    returns = reward_to_go(rewards, valid, 1.0)  # docs/paper_spec.md §5.1
    adv = compute_advantages(returns, prompt, valid, config=method)  # [E, T]
    e, t = rewards.shape
    logp = policy.log_probs(prompt.repeat_interleave(t), contexts.reshape(e * t, -1))
    logp = logp.gather(2, tokens.reshape(e * t, -1, 1)).squeeze(2)  # [E*T, L]
    mask = valid.reshape(-1, 1).expand_as(logp)
    cfg = LossConfig(agg="seq-mean-token-sum", loss_scale_factor=1.0)  # the authors' aggregation
    loss, _ = policy_loss(logp, logp.detach(), adv.reshape(-1).float(), mask, cfg)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(rewards.mean())


def train(task: Task, method: AdvantageConfig, run: Run, seed: int) -> dict[str, list[float]]:
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(task.vocab, (task.prompts, task.length), generator=gen)
    policy = TabularPolicy(task)
    params = policy.parameters()
    opt = (
        torch.optim.Adam(params, lr=run.lr) if run.optimizer == "adam" else torch.optim.SGD(params, lr=run.lr)
    )
    curve: dict[str, list[float]] = {"step": [], "first": [], "last": [], "best": []}
    for step in range(run.steps + 1):
        if step % run.eval_every == 0:
            p = policy.success_by_turn(codes)  # [P, T]
            curve["step"].append(step)
            curve["first"].append(float(p[:, 0].mean()))
            curve["last"].append(float(p[:, -1].mean()))
        if step < run.steps:
            train_step(policy, opt, codes, method, run, gen)
    return curve


def steps_to(curve: dict[str, list[float]], threshold: float) -> int | None:
    return next((s for s, v in zip(curve["step"], curve["last"], strict=True) if v >= threshold), None)


def summarize(curves: list[dict[str, list[float]]], run: Run) -> dict[str, str]:
    hits = [steps_to(c, run.threshold) for c in curves]
    reached = [h for h in hits if h is not None]
    finals = [c["last"][-1] for c in curves]
    firsts = [c["first"][-1] for c in curves]
    areas = [statistics.fmean(c["last"]) for c in curves]

    def ms(xs: list[float]) -> str:
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        return f"{statistics.fmean(xs):.3f} ± {sd:.3f}"

    steps = f"{statistics.fmean(reached):.0f}" if reached else "–"
    if reached and len(reached) > 1:
        steps += f" ± {statistics.stdev(reached):.0f}"
    return {
        "steps": f"{steps} ({len(reached)}/{len(hits)})",
        "final_last": ms(finals),
        "final_first": ms(firsts),
        "auc": ms(areas),
    }


def plot(results, run_cfgs, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(run_cfgs), len(TASKS), figsize=(11, 4 * len(run_cfgs)), squeeze=False)
    for r, (opt_name, run) in enumerate(run_cfgs.items()):
        for c, task in enumerate(TASKS):
            ax = axes[r][c]
            for method in METHODS:
                curves = results[(opt_name, task.name, method)]
                steps = torch.tensor(curves[0]["step"])
                ys = torch.tensor([cv["last"] for cv in curves])
                mean = ys.mean(0)
                ax.plot(steps, mean, label=method)
                ax.fill_between(steps, ys.min(0).values, ys.max(0).values, alpha=0.15)
            ax.axhline(run.threshold, color="grey", lw=0.8, ls=":")
            ax.set_title(f"{task.name}, {opt_name} lr={run.lr}", fontsize=10)
            ax.set_xlabel(f"step ({run.prompts_per_step * run.rollouts * TASKS[c].turns} turn-samples each)")
            ax.set_ylabel(f"P(success at turn {task.turns})")
            ax.set_ylim(0, 1)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def table(results, run_cfgs, seeds: list[int]) -> str:
    any_run = next(iter(run_cfgs.values()))
    lines = [
        "| optimizer | task | method | steps to P(last turn) ≥ "
        f"{any_run.threshold} (seeds reaching) | final P(success), last turn | final P(success), turn 1 "
        "| mean P(last turn) over training |",
        "|---|---|---|---|---|---|---|",
    ]
    for opt_name in run_cfgs:
        for task in TASKS:
            for method in METHODS:
                s = summarize(results[(opt_name, task.name, method)], run_cfgs[opt_name])
                lines.append(
                    f"| {opt_name} | {task.name} | {method} | {s['steps']} | {s['final_last']} "
                    f"| {s['final_first']} | {s['auc']} |"
                )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, 100 steps, no files written")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("docs"))
    args = parser.parse_args()
    seeds = list(range(2 if args.quick else args.seeds))
    base = Run(steps=100) if args.quick else Run()
    run_cfgs = {"adam": base, "sgd": dataclasses.replace(base, optimizer="sgd", lr=40.0)}
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    results = {}
    for opt_name, run in run_cfgs.items():
        for task in TASKS:
            for method, cfg in METHODS.items():
                results[(opt_name, task.name, method)] = [train(task, cfg, run, seed) for seed in seeds]
            print(f"{opt_name} / {task.name}: done at {time.perf_counter() - t0:.0f} s", flush=True)
    md = table(results, run_cfgs, seeds)
    print(md)
    if not args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        plot(results, run_cfgs, args.out / "rl_experiment.png")
        (args.out / "rl_experiment.md").write_text(
            report(md, run_cfgs, seeds, time.perf_counter() - t0), encoding="utf-8"
        )
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


def report(md: str, run_cfgs, seeds: list[int], seconds: float) -> str:
    run = run_cfgs["adam"]
    tasks = "; ".join(f"{t.name}: V={t.vocab}, L={t.length}" for t in TASKS)
    return (
        "# TRLOO vs GRPO vs RLOO on a synthetic multi-turn task\n\n"
        "Generated by `python experiments/trloo_vs_grpo/run.py` "
        f"({len(seeds)} seeds per cell, {seconds:.0f} s on a 2-core CPU). Do not edit by hand.\n\n"
        f"Task: 16 prompts, each hides a code of L symbols out of V ({tasks}); {TASKS[0].turns} turns; "
        "reward 1 for a fully correct turn, else 0; feedback = which positions were right. Tabular "
        f"softmax policy. Each step: {run.prompts_per_step} prompts x {run.rollouts} rollouts x "
        f"{TASKS[0].turns} turns, one on-policy update (void-turn mask, gamma = 1, clipped loss with "
        "seq-mean-token-sum aggregation). Success probabilities are exact, not sampled. "
        "Mean ± sd over seeds.\n\n" + md + "\n\n![curves](rl_experiment.png)\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
