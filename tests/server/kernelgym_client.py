"""A client that behaves like the authors' Dr. Kernel reward client, written afresh from reading it
(drkernel/kernel/rewards/reward_client.py in hkust-nlp/KernelGYM; no code copied).

What it reproduces, because a drop-in must survive it:
- preflight: no `class <ep>` / `class <ep>New` substring -> the penalty, no request;
- POST /evaluate; 200 ends submission; 429/503 sleep and retry (bounded); any other 4xx/5xx is a
  failed task carrying the HTTP error; 202 is neither, so the request is re-sent at once;
- poll GET /status/{id} at a fixed interval; `completed` -> GET /results/{id} with its status
  forced to completed; `failed`/`timeout`/`cancelled` -> the status word and the error_message of
  the *status* answer (KernelGYM's status model has none, so "Task failed");
- the three reward functions of the recipes: like_kernel (step function), weighted (the trainer
  yaml: 0.5 / 0.5, eps 0.01, coverage off) and speedup (the 8B/14B recipes: clip at 3, coverage on
  with weight 0.5 on time coverage).
The merged dict (raw result | reward summary) is what their multi-turn rollout pastes into the
next prompt; `prompt_error` is the error text a model sees from it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

FINAL = ("completed", "failed", "timeout", "cancelled")


@dataclass
class RewardConfig:
    init_correct_weight: float = 0.5
    init_performance_weight: float = 0.5
    speedup_eps: float = 0.01
    penalty_score: float = 0.0
    upper_bound: float = 3.0
    lower_bound: float = 0.0
    coverage_enable: bool = False
    coverage_weight: float = 0.25
    coverage_type: str = "time_coverage"
    compilation_fail: float = -0.5
    correctness_fail: float = -0.3
    perf_degrade: float = -0.1


WEIGHTED = RewardConfig()  # kernel_trainer.yaml
SPEEDUP = RewardConfig(coverage_enable=True, coverage_weight=0.5)  # the shipped RL recipes


@dataclass
class KernelGymStyleClient:
    base_url: str
    poll_s: float = 0.05
    client_timeout_s: float = 60.0
    max_retries: int = 3
    max_reposts: int = 50  # theirs has no limit; ours stops a runaway loop and counts it
    reposts: int = 0
    posts: list[int] = field(default_factory=list)

    def submit_and_poll(self, payload: dict[str, Any]) -> dict[str, Any]:
        start = time.monotonic()
        with httpx.Client(base_url=self.base_url, timeout=120) as http:
            attempt = 0
            while attempt < self.max_retries:
                resp = http.post("/evaluate", json=payload)
                self.posts.append(resp.status_code)
                if resp.status_code == 200:
                    break
                if resp.status_code in (429, 503):
                    time.sleep(0.05 * 2 ** attempt)
                    attempt += 1
                    continue
                if resp.status_code >= 400:
                    return {"status": "failed",
                            "error_message": f"HTTP {resp.status_code}: {resp.text[:300]}"}
                self.reposts += 1  # a 2xx other than 200: theirs re-posts at once
                if self.reposts >= self.max_reposts:
                    return {"status": "failed", "error_message": "runaway re-POST loop"}
            task_id = payload["task_id"]
            while time.monotonic() - start < self.client_timeout_s:
                s = http.get(f"/status/{task_id}")
                if s.status_code == 200:
                    status = s.json().get("status", "unknown")
                    if status in FINAL:
                        if status == "completed":
                            r = http.get(f"/results/{task_id}")
                            if r.status_code != 200:
                                return {"status": status, "error_message":
                                        f"Failed to fetch results: HTTP {r.status_code}"}
                            return r.json() | {"status": status}
                        return {"status": status,
                                "error_message": s.json().get("error_message", f"Task {status}")}
                time.sleep(self.poll_s)
        return {"status": "timeout", "error_message": "client-side timeout"}


def preflight(reference_code: str, kernel_code: str, entry_point: str = "Model") -> str | None:
    missing = [w for w, code in ((f"class {entry_point}", reference_code),
                                 (f"class {entry_point}New", kernel_code)) if w not in code]
    return ", ".join(missing) or None


def _failed_summary(result: dict[str, Any], reward: float) -> dict[str, Any]:
    message = result.get("error_message", "Task failed")
    if message == "Task failed":
        message = result.get("error", "Task failed")
    return {"reward": reward, "speedup": 0.0, "success": False, "correctness": False,
            "compiled": False, "error": message}


def _decoy_summary(reward: float) -> dict[str, Any]:
    return {"reward": reward, "speedup": 0.0, "success": False, "correctness": False,
            "compiled": False, "decoy_kernel": True,
            "error": "Reward hacking: Decoy kernel detected"}


def reward_like_kernel(result: dict[str, Any], cfg: RewardConfig = WEIGHTED) -> dict[str, Any]:
    if result.get("status") != "completed":
        return _failed_summary(result, -1.0)
    if result.get("decoy_kernel", False):
        return _decoy_summary(-1.0)
    correct = result.get("correctness", False)
    speedup = result.get("speedup", 0.0)
    compiled = result.get("compiled", False)
    if not compiled:
        reward = cfg.compilation_fail
    elif not correct:
        reward = cfg.correctness_fail
    else:
        steps = ((3.0, 1.0), (2.0, 0.8), (1.5, 0.6), (1.2, 0.4), (1.0, 0.2))
        reward = next((r for bound, r in steps if speedup >= bound), cfg.perf_degrade)
    return {"reward": reward, "speedup": speedup, "success": compiled and correct,
            "correctness": correct, "compiled": compiled}


def coverage(result: dict[str, Any], cfg: RewardConfig) -> float:
    """Their coverage: keys looked up in metadata first, then at the top level; 0 if absent."""
    meta = result.get("metadata") or {}

    def get(*keys: str) -> float:
        for k in keys:
            if k in meta:
                return float(meta.get(k) or 0)
            if k in result:
                return float(result.get(k) or 0)
        return 0.0

    if cfg.coverage_type == "time_coverage":
        total = get("total_kernel_run_time_in_profiling_us")
        return get("custom_kernel_cuda_time_in_profiling_us") / total if total > 0 else 0.0
    total = get("num_total_kernels", "num_total_kernel")
    return get("num_custom_kernels", "num_custom_kernel") / total if total > 0 else 0.0


def _linear(result: dict[str, Any], cfg: RewardConfig, perf_term: float) -> dict[str, Any]:
    correct = result.get("correctness", False)
    reward = cfg.init_correct_weight * correct + cfg.init_performance_weight * perf_term
    if correct and cfg.coverage_enable:
        reward += cfg.coverage_weight * coverage(result, cfg)
    return {"reward": reward, "speedup": result.get("speedup") or 0.0,
            "correctness": correct, "compiled": result.get("compiled", False)}


def reward_weighted(result: dict[str, Any], cfg: RewardConfig = WEIGHTED) -> dict[str, Any]:
    if result.get("status") != "completed":
        return _failed_summary(result, cfg.penalty_score)
    if result.get("decoy_kernel", False):
        return _decoy_summary(cfg.penalty_score)
    speedup = result.get("speedup") or 0.0
    return _linear(result, cfg, float(speedup >= 1 + cfg.speedup_eps))


def reward_speedup(result: dict[str, Any], cfg: RewardConfig = SPEEDUP) -> dict[str, Any]:
    if result.get("status") != "completed":
        return _failed_summary(result, cfg.penalty_score)
    if result.get("decoy_kernel", False):
        return _decoy_summary(cfg.penalty_score)
    s = min(result.get("speedup") or 0.0, cfg.upper_bound)
    return _linear(result, cfg, 0.0 if s < cfg.lower_bound else s)


def rewards(result: dict[str, Any]) -> tuple[float, float, float]:
    return (reward_like_kernel(result)["reward"], reward_weighted(result)["reward"],
            reward_speedup(result)["reward"])


def prompt_error(result: dict[str, Any], summary: dict[str, Any]) -> str | None:
    """The error text the next turn's prompt gets from the merged result."""
    merged = result | summary
    return merged.get("error") or merged.get("error_message")
