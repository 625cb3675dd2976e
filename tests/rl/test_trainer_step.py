"""One trainer step on scripted rollouts and the fake judge: masks, filter, advantages, update."""

import json
import math

import pytest
import torch

from drkernel.agent.policy import Completion
from drkernel.errors import ExecutorError
from drkernel.executors.fake import FakeExecutor
from drkernel.recipes import debug_cpu
from drkernel.rl.config import TinyModelConfig, apply_overrides
from drkernel.rl.tiny import build_tiny
from drkernel.rl.trainer import Trainer
from drkernel.types import Problem

GOOD = "```python\nclass ModelNew:\n    pass\n# fake: speedup=2.0\n# fake: coverage=0.9\n```"
LOW_PR = "```python\nclass ModelNew:\n    pass\n# fake: speedup=2.0\n# fake: coverage=0.1\n```"
BAD = "```python\nclass ModelNew:\n    pass\n# fake: incorrect\n```"

# problem -> per sample: (text of every turn, rollout log-probs are wrong: MRS must reject it)
SCRIPT = {
    "A": [(GOOD, False), (BAD, False), (BAD, True)],
    "B": [(BAD, False), (BAD, False), (BAD, False)],  # tied: the group filter drops it
    "C": [(LOW_PR, False), (BAD, False), (GOOD, False)],  # PRS drops the low-PR sample
}


class ScriptedSampler:
    """Known texts and token ids; log-probs None (compared with themselves) or far off."""

    def __init__(self, n):
        self.n = n

    def count_tokens(self, text):
        return len(text.split())

    def sample(self, conversations, sampling):
        out = []
        for i, conv in enumerate(conversations):
            name = conv[0]["content"].split("PROBLEM_")[1][0]
            text, off = SCRIPT[name][i % self.n]
            ids = [7, 8, 9]
            out.append(Completion(text=text, finish_reason="stop", token_ids=ids,
                                  logprobs=[-9.0, -9.0, -9.0] if off else None,
                                  extra={"prompt_ids": [3, 4, 5, 6]}))
        return out


def _problem(name):
    return Problem(name=name, reference_code=f"# PROBLEM_{name}\nclass Model:\n    pass\n")


def _trainer(tmp_path, script_overrides=()):
    cfg = apply_overrides(debug_cpu(), [
        "rollout.n=3", "trainer.prompts_per_step=3", "trainer.steps=1", "trainer.validate_every=0",
        "judge.executor=fake", "rollout.cache_evaluations=false", "log.tensorboard=false", *script_overrides,
    ])
    model, tok = build_tiny(TinyModelConfig(), {"x": {"honest": "class ModelNew: pass"}}, seed=0)
    return Trainer(cfg, tmp_path, model=model, tokenizer=tok, problems=[_problem(n) for n in "ABC"],
                   validation=[], executor=FakeExecutor(), sampler=ScriptedSampler(3))


def test_step_masks_filter_advantages_and_update(tmp_path):
    with _trainer(tmp_path) as tr:
        before = [p.detach().clone() for p in tr.model.parameters()]
        batch, _ = tr._rollouts()
        names = [batch.problems[g].name for g in batch.group_ids]
        from drkernel.rl.step import prepare_step

        groups_ok = tr._pick_groups(batch)
        t = prepare_step(batch, groups_ok, tr.model, tr.tokenizer, tr.config, step=1)
        row = {(names[i], i % 3): i for i in range(9)}
        assert [bool(groups_ok[row["B", s]]) for s in range(3)] == [False] * 3
        assert bool(groups_ok[row["A", 0]]) and bool(groups_ok[row["C", 0]])
        assert not t.mrs_kept[row["A", 2]].any() and t.mrs_kept[row["A", 0]].all()  # MRS: whole trajectory
        assert not t.prs_kept[row["C", 0]].any() and t.prs_kept[row["C", 2]].all()  # PRS: PR 0.1 < 0.3
        # paper reward 1 + min(2, 3) + 0.9 = 3.9 per good turn; returns (7.8, 3.9) vs (0, 0)
        a0, a1 = t.advantages[row["A", 0]], t.advantages[row["A", 1]]
        assert torch.allclose(a0, torch.tensor([7.8, 3.9])) and torch.allclose(a1, torch.tensor([-7.8, -3.9]))
        assert (t.advantages[row["A", 2]] == 0).all()  # rejected: no advantage, not in the baseline
        trained = t.loss_mask.view(9, 2, -1).any(-1)
        assert trained[row["A", 0]].all() and not trained[row["A", 2]].any()
        assert not trained[[row["B", s] for s in range(3)]].any()
        metrics = tr._gradients(t)
        assert metrics["actor/skipped"] == 0 and metrics["actor/grad_norm"] > 0
        tr._apply(metrics)
        assert any(not torch.equal(a, b) for a, b in zip(before, tr.model.parameters()))


def test_fit_writes_metrics_and_checkpoint(tmp_path):
    with _trainer(tmp_path) as tr:
        (m,) = tr.fit()
    assert m["filter/groups"] == 3 and m["filter/groups_kept"] == 2
    assert m["mrs/reject_rate"] > 0 and m["prs/reject_rate"] > 0
    assert m["batch/fast@1.2"] == pytest.approx(3 / 9)  # A0, C0 and C2 are correct at 2x at the last turn
    assert m["batch/hack_rate"] == 0.0
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert record["step"] == 1 and record["actor/skipped"] == 0
    assert record["time/step_s"] >= record["time/update_s"] > 0
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_000001"
    assert json.loads((tmp_path / "config.json").read_text())["rollout"]["n"] == 3
    assert len((tmp_path / "rollouts" / "step_000001.jsonl").read_text().splitlines()) == 9


def test_an_all_filtered_batch_skips_the_update_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.setitem(SCRIPT, "A", [(BAD, False)] * 3)
    monkeypatch.setitem(SCRIPT, "C", [(BAD, False)] * 3)
    with _trainer(tmp_path, ["trainer.steps=2", "rl.max_sampling_rounds=2"]) as tr:
        before = [p.detach().clone() for p in tr.model.parameters()]
        metrics = tr.fit()
        assert all(torch.equal(a, b) for a, b in zip(before, tr.model.parameters()))
    assert [m["actor/skipped"] for m in metrics] == [1, 1]
    assert [m["data/sampling_rounds"] for m in metrics] == [2, 2]  # refill tried, nothing survived
    assert metrics[0]["filter/groups_kept"] == 0 and metrics[0]["actor/loss"] == 0.0
    assert (tmp_path / "checkpoints" / "step_000002").is_dir()


def test_resume_restores_weights_tokenizer_optimizer_and_cursor(tmp_path):
    with _trainer(tmp_path) as tr:
        tr.fit()
        weights = {k: v.clone() for k, v in tr.model.state_dict().items()}
        vocab = tr.tokenizer.get_vocab()
        cursor = tr.state.cursor
        moments = tr.optimizer.state_dict()["state"][0]["exp_avg"].clone()
        rng_next = torch.rand(3)  # the RNG stream the next step would see
    with _trainer(tmp_path, ["trainer.steps=2"]) as again:
        assert again.state.step == 1 and again.state.cursor == cursor
        assert again.tokenizer.get_vocab() == vocab
        assert all(torch.equal(weights[k], v) for k, v in again.model.state_dict().items())
        assert torch.equal(again.optimizer.state_dict()["state"][0]["exp_avg"], moments)
        assert torch.equal(torch.rand(3), rng_next)
        (m,) = again.fit()
    assert m["step"] == 2


@pytest.mark.parametrize("seed", [1733000000123456789, -(2**63), 10**30])
def test_a_seed_of_any_size_trains_and_builds_its_model(tmp_path, seed):
    # `--set trainer.seed=$(date +%s%N)` passed the config and ended the first step in a traceback: the
    # prompt order's and PRS's seeds (seed * 100_003 + epoch, seed * 1_000_003 + step) left torch's 64 bits
    (tmp_path / "a").mkdir()
    with _trainer(tmp_path / "a", [f"trainer.seed={seed}"]) as tr:
        (m,) = tr.fit()
    assert m["step"] == 1
    assert build_tiny(TinyModelConfig(), {"x": {"honest": "class ModelNew: pass"}}, seed=seed)[0] is not None


def test_a_step_reports_its_phases_with_the_time_left(tmp_path):
    """Rollouts (generation, judging with a count), scoring, update, then the run's time left."""
    import io

    from drkernel.rl.progress import Progress

    stream = io.StringIO()
    with _trainer(tmp_path) as tr:
        tr.progress = Progress(stream, tty=False, interval_s=0.0)
        tr.fit()
    text = stream.getvalue()
    assert "step 1/1: rollouts, 3 prompts x 3 samples, up to 2 turns" in text
    assert "turn 1/2: generating 9 responses" in text
    assert "turn 1/2: judging: 1/9 kernels" in text and "left" in text  # a count and an estimate as it goes
    assert "turn 1/2: judging: 9/9 kernels" in text
    assert "step 1/1: scoring" in text and "step 1/1: update on" in text
    assert "step 1/1: done in" in text and "about 0s left" in text


def test_metrics_go_to_weights_and_biases_when_it_is_set_up(tmp_path, monkeypatch):
    """Offline mode: a real W&B run folder beside TensorBoard's, resumed under the same id."""
    wandb = pytest.importorskip("wandb")
    from drkernel.rl.runlog import RunLog, wandb_wanted

    for key in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: not set up
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert not wandb_wanted("auto") and wandb_wanted("on") and not wandb_wanted("off")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_wanted("auto")
    log = RunLog(tmp_path, tensorboard=False, wandb="auto", run_name="t", config={"a": 1})
    assert log._wandb is not None
    log.write(1, {"reward/mean": 0.5, "skipped": None})
    log.close()
    run_id = (tmp_path / "wandb_run_id").read_text()
    assert list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    assert wandb.run is None  # finished


def test_a_model_server_that_fails_every_rollout_stops_the_run_keeping_its_steps(tmp_path):
    """A server that answered at the start and then failed every request: each step logged reward nan,
    checkpointed nothing worth having, and the run ended with exit 0."""
    from drkernel.errors import PolicyError

    class Dies(ScriptedSampler):
        dead = False

        def sample(self, conversations, sampling):
            if self.dead:
                raise PolicyError("POST /v1/chat/completions: HTTP 500")
            return super().sample(conversations, sampling)

    with _trainer(tmp_path, ["trainer.steps=3", "trainer.save_every=2"]) as tr:
        tr.sampler = sampler = Dies(3)
        steps = tr.fit_iter()
        assert next(steps)["step"] == 1
        sampler.dead = True  # the server answered step 1, then fails every request
        with pytest.raises(PolicyError, match="step 2: the generation of every rollout failed, nothing to "
                                              "train on \\(POST /v1/chat/completions: HTTP 500\\); the run "
                                              "stops after step 1: rerun"):
            next(steps)
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1]
    # step 1 was not due a checkpoint (save_every 2), yet it is kept: the rerun starts at step 2
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_000001"


class _DyingJudge(FakeExecutor):
    """A judge server that answers until `dead` is set, then refuses every connection."""

    dead = False

    def evaluate(self, requests):
        if self.dead:
            raise ExecutorError("POST /v1/evaluate: ConnectError: [Errno 111] Connection refused")
        return super().evaluate(requests)


def test_a_judge_that_fails_every_evaluation_stops_the_run_keeping_its_steps(tmp_path):
    """A judge server that answered at the start, then went away: each step's every evaluation failed,
    the step trained on nothing (reward 0, groups 0/3) and the run went on to its last step, exit 0."""
    judge = _DyingJudge()
    cfg = apply_overrides(debug_cpu(), [
        "rollout.n=3", "trainer.prompts_per_step=3", "trainer.steps=3", "trainer.save_every=2",
        "trainer.validate_every=0", "judge.executor=fake", "rollout.cache_evaluations=false",
        "log.tensorboard=false",
    ])
    model, tok = build_tiny(TinyModelConfig(), {"x": {"honest": "class ModelNew: pass"}}, seed=0)
    with Trainer(cfg, tmp_path, model=model, tokenizer=tok, problems=[_problem(n) for n in "ABC"],
                 validation=[], executor=judge, sampler=ScriptedSampler(3)) as tr:
        steps = tr.fit_iter()
        assert next(steps)["step"] == 1
        judge.dead = True
        with pytest.raises(ExecutorError, match=r"step 2: the judge gave no verdict for any of the step's "
                                                r"kernels \(.*ConnectError.*\); the run stops after step 1: "
                                                r"rerun"):
            next(steps)
    assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1]
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_000001"


def test_a_step_with_some_verdicts_goes_on(tmp_path):
    """One evaluation failing is the judge's fault on that episode (masked), not a judge gone away."""

    class Flaky(FakeExecutor):
        tries = 0

        def evaluate(self, requests):
            self.tries += 1
            if self.tries % 2:
                raise ExecutorError("worker lost")
            return super().evaluate(requests)

    cfg = apply_overrides(debug_cpu(), [
        "rollout.n=3", "trainer.prompts_per_step=3", "trainer.steps=2", "trainer.validate_every=0",
        "judge.executor=fake", "rollout.cache_evaluations=false", "log.tensorboard=false",
        "rollout.concurrency=1",
    ])
    model, tok = build_tiny(TinyModelConfig(), {"x": {"honest": "class ModelNew: pass"}}, seed=0)
    with Trainer(cfg, tmp_path, model=model, tokenizer=tok, problems=[_problem(n) for n in "ABC"],
                 validation=[], executor=Flaky(), sampler=ScriptedSampler(3)) as tr:
        assert [m["step"] for m in tr.fit_iter()] == [1, 2]


@pytest.mark.parametrize("state", ['{"step": 1}', "[]", '{"step": "one", "cursor": 3}',
                                   '{"step": 1, "cursor": null}'])
def test_a_checkpoint_whose_state_is_damaged_is_one_line_naming_it(tmp_path, state):
    # a state.json without its cursor was a KeyError traceback (a list: TypeError, a word: ValueError)
    from drkernel.errors import ConfigError

    with _trainer(tmp_path) as tr:
        tr.fit()
    (tmp_path / "checkpoints" / "step_000001" / "state.json").write_text(state)
    with pytest.raises(ConfigError, match=r"checkpoint .*step_000001: unreadable"):
        _trainer(tmp_path, ["trainer.steps=2"])


def test_judge_cache_counts_are_the_steps_own(tmp_path):
    # they were counts since the process started: step 2 reported step 1's hits and misses too (and a
    # resumed run started again from 0)
    with _trainer(tmp_path, ["trainer.steps=2", "rollout.cache_evaluations=true"]) as tr:
        first, second = tr.fit()
    judged = first["judge/cache_hits"] + first["judge/cache_misses"]
    assert judged > first["judge/cache_misses"] > 0  # the script repeats kernels within a step
    assert second["judge/cache_misses"] == 0  # the same script: every kernel was judged in step 1
    assert second["judge/cache_hits"] == judged


def test_a_run_stopped_by_a_dead_judge_reruns_the_failed_steps_prompts(tmp_path):
    """The emergency checkpoint held the data cursor and RNG of after the failed step (its prompts
    drawn, its sampling done): the rerun skipped those prompts."""
    import random

    judge = _DyingJudge()
    with _trainer(tmp_path, ["trainer.steps=3", "trainer.save_every=2"]) as tr:
        tr.executor = judge
        steps = tr.fit_iter()
        assert next(steps)["step"] == 1
        cursor = tr.state.cursor
        wanted = tr._next_prompts(3)  # the prompts step 2 draws
        tr.state.cursor = cursor
        torch_rng, py_rng = torch.get_rng_state(), random.getstate()
        judge.dead = True
        with pytest.raises(ExecutorError):
            next(steps)
    state = json.loads((tmp_path / "checkpoints" / "step_000001" / "state.json").read_text())
    assert state["step"] == 1 and state["cursor"] == cursor == 3
    torch.manual_seed(123)
    random.seed(123)
    with _trainer(tmp_path, ["trainer.steps=3"]) as again:
        assert again.state.step == 1 and again.state.cursor == cursor
        assert torch.equal(torch.get_rng_state(), torch_rng) and random.getstate() == py_rng
        assert [p.name for p in again._next_prompts(3)] == [p.name for p in wanted]


class _Interruptible(ScriptedSampler):
    interrupt = False

    def sample(self, conversations, sampling):
        if self.interrupt:
            raise KeyboardInterrupt
        return super().sample(conversations, sampling)


def _saved(tmp_path):
    latest = (tmp_path / "checkpoints" / "latest").read_text().strip()
    return latest, json.loads((tmp_path / "checkpoints" / latest / "state.json").read_text())


def _logged(tmp_path):
    return [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]


def test_ctrl_c_mid_step_keeps_the_steps_done_and_redoes_the_stopped_one(tmp_path):
    # with save_every 10 every step since the last checkpoint was lost to Ctrl-C
    with _trainer(tmp_path, ["trainer.steps=5", "trainer.save_every=10"]) as tr:
        tr.sampler = sampler = _Interruptible(3)
        steps = tr.fit_iter()
        assert [next(steps)["step"], next(steps)["step"]] == [1, 2]
        rng = torch.get_rng_state()
        sampler.interrupt = True  # within step 3's rollouts
        with pytest.raises(KeyboardInterrupt):
            next(steps)
    assert _saved(tmp_path) == ("step_000002", {"step": 2, "cursor": 6, "extra": {}})
    assert _logged(tmp_path) == [1, 2]
    with _trainer(tmp_path, ["trainer.steps=5", "trainer.save_every=10"]) as again:
        assert (again.state.step, again.state.cursor) == (2, 6)
        assert torch.equal(torch.get_rng_state(), rng)
        assert [m["step"] for m in again.fit()] == [3, 4, 5]
    assert _logged(tmp_path) == [1, 2, 3, 4, 5]


def test_ctrl_c_in_validation_keeps_the_steps_update(tmp_path):
    with _trainer(tmp_path, ["trainer.steps=4", "trainer.save_every=10", "trainer.validate_every=2"]) as tr:
        tr.validation = [_problem("A")]

        def validate(step):
            raise KeyboardInterrupt

        tr.validate = validate
        with pytest.raises(KeyboardInterrupt):
            tr.fit()
        weights = {k: v.clone() for k, v in tr.model.state_dict().items()}
    assert _saved(tmp_path) == ("step_000002", {"step": 2, "cursor": 6, "extra": {}})
    assert _logged(tmp_path) == [1, 2]  # step 2's line without val/*
    with _trainer(tmp_path, ["trainer.steps=4", "trainer.save_every=10"]) as again:
        assert again.state.step == 2
        assert all(torch.equal(weights[k], v) for k, v in again.model.state_dict().items())


def test_a_step_due_a_checkpoint_is_saved_before_validation(tmp_path):
    with _trainer(tmp_path, ["trainer.steps=4", "trainer.save_every=2", "trainer.validate_every=2"]) as tr:
        tr.validation = [_problem("A")]

        def validate(step):
            raise RuntimeError("validation crashed")

        tr.validate = validate
        with pytest.raises(RuntimeError):
            tr.fit()
    assert _saved(tmp_path)[0] == "step_000002"


def test_ctrl_c_between_steps_keeps_the_last_one(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with _trainer(tmp_path, ["trainer.steps=5", "trainer.save_every=10"]) as tr:
            for m in tr.fit_iter():
                if m["step"] == 2:
                    raise KeyboardInterrupt  # the caller's own work on the step's metrics
    assert _saved(tmp_path) == ("step_000002", {"step": 2, "cursor": 6, "extra": {}})


def test_ctrl_c_during_the_optimizer_step_counts_the_step(tmp_path):
    import signal

    # Python's own Ctrl-C handler, as a terminal's command has it: a process started in a shell's
    # background (CI's pytest, launched with `&`) inherits SIGINT ignored, and Python then installs none
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_during_the_optimizer_step(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_during_the_optimizer_step(tmp_path):
    import signal

    with _trainer(tmp_path, ["trainer.steps=3", "trainer.save_every=10"]) as tr:
        step = tr.optimizer.step

        def step_then_ctrl_c(*args, **kwargs):
            out = step(*args, **kwargs)
            signal.raise_signal(signal.SIGINT)  # as the weights have just moved
            return out

        tr.optimizer.step = step_then_ctrl_c
        with pytest.raises(KeyboardInterrupt):
            tr.fit()
        weights = {k: v.clone() for k, v in tr.model.state_dict().items()}
    assert _saved(tmp_path) == ("step_000001", {"step": 1, "cursor": 3, "extra": {}})
    assert _logged(tmp_path) == [1]
    with _trainer(tmp_path, ["trainer.steps=3"]) as again:
        assert all(torch.equal(weights[k], v) for k, v in again.model.state_dict().items())


class _Overlong(ScriptedSampler):
    """Every prompt of the problems in `overlong` is too long: an empty turn, nothing generated."""

    def __init__(self, n, overlong):
        super().__init__(n)
        self.overlong = overlong

    def sample(self, conversations, sampling):
        out = super().sample(conversations, sampling)
        for i, conv in enumerate(conversations):
            if conv[0]["content"].split("PROBLEM_")[1][0] in self.overlong:
                out[i] = Completion(text="", finish_reason="prompt_overlong", token_ids=[], logprobs=[],
                                    extra={"prompt_ids": [3, 4, 5, 6]})
        return out


def test_a_step_with_nothing_generated_or_judged_logs_those_metrics_as_not_measured(tmp_path):
    # batch/hack_rate and response_length/mean were 0: no kernel hacked, responses of no tokens
    with _trainer(tmp_path, ["trainer.steps=2"]) as tr:
        steps = tr.fit_iter()
        tr.sampler = _Overlong(3, "ABC")
        m = next(steps)
        assert math.isnan(m["batch/hack_rate"]) and math.isnan(m["response_length/mean"])
        # a prompt that did not fit is not the model's code-less answer (batch/no_code read 1.0)
        assert (m["batch/no_code"], m["batch/prompt_overlong"]) == (0.0, 1.0)
        tr.sampler = _Overlong(3, "A")  # the empty turns are no responses of length 0
        m = next(steps)
        assert m["response_length/mean"] == 3 and m["batch/hack_rate"] == 0
        assert m["batch/no_code"] == 0.0 and 0 < m["batch/prompt_overlong"] < 1
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert record["batch/hack_rate"] is None and record["response_length/mean"] is None


def test_progress_of_one_says_one_in_the_singular(tmp_path):
    # "validating on 1 problems", "1 prompts x 1 samples, up to 1 turns", "generating 1 responses"
    import io
    import re

    from drkernel.rl.progress import Progress

    stream = io.StringIO()
    with _trainer(tmp_path, ["rollout.n=1", "trainer.prompts_per_step=1", "rollout.max_turns=1",
                             "trainer.validate_every=1", "rl.dynamic_sampling.enabled=false"]) as tr:
        tr.sampler, tr.validation = ScriptedSampler(1), [_problem("A")]
        tr.validate = lambda step: {}
        tr.progress = Progress(stream, tty=False, interval_s=0.0)
        tr.fit()
    text = stream.getvalue()
    assert "step 1/1: rollouts, 1 prompt x 1 sample, up to 1 turn" in text
    assert "turn 1/1: generating 1 response" in text and "step 1/1: scoring 1 turn " in text
    assert "step 1/1: validating on 1 problem" in text
    assert not re.search(r"\b1 (problem|prompt|sample|turn|response|row|token)s\b", text), text


def test_log_wandb_on_without_the_package_is_refused_by_the_trainer_itself(tmp_path, monkeypatch):
    """`drkernel train rl` refused it; a Trainer built in Python trained without W&B, a warning the only
    sign. Refused before the run's folder is made, as the CLI does; the same for run_sft."""
    import importlib.util

    from drkernel.errors import ConfigError
    from drkernel.rl.config import SFTConfig
    from drkernel.rl.sft import run_sft

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match="log.wandb=on: the wandb package is not installed"):
        _trainer(tmp_path / "run", ["log.wandb=on"])
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="log.wandb=on"):
        run_sft(SFTConfig(), [], None, None, tmp_path / "sft", wandb="on")
    assert not (tmp_path / "sft").exists()
