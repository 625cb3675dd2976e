"""Faults are data: each fault of tests/assets/faults ends in a result with a status and an error
kind, the judge survives it, and the next evaluation on the same judge is unaffected."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drkernel.errors import ConfigError
from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOutcome, EvalRequest, EvalResult, EvalStatus
from tests.sandbox.corpus import FAST, Asset, asset, corpus, reference_code

MEMORY_LIMIT_MB = 1200  # small, so the memory hog is stopped long before it hurts this machine
DEAD_SANDBOX_NOTICED_S = 2.5  # a crash must be seen at once, not at the (120 s) timeout


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None, memory_limit_mb=MEMORY_LIMIT_MB) as j:
        yield j


def evaluate(judge: Judge, fault: Asset, reference: str | None = None) -> EvalResult:
    return judge.evaluate(EvalRequest(reference_code=reference or fault.reference, kernel_code=fault.code,
                                      options=fault.options()))


def describe(r: EvalResult) -> str:
    return f"{r.outcome.value} error={r.error} hacks={r.hack_details} wall={r.wall_s}"


def assert_next_evaluation_unaffected(judge: Judge) -> None:
    honest = asset("kernels", "relu_scale")
    result = judge.evaluate(EvalRequest(reference_code=honest.reference, kernel_code=honest.code,
                                        options=FAST))
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert result.reward > 0


def _param(fault: Asset) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=fault.meta["xfail"])] if "xfail" in fault.meta else []
    return pytest.param(fault, id=fault.name, marks=marks)


CPU_FAULTS = [f for f in corpus("faults") if f.meta.get("device") != "gpu"]


@pytest.mark.parametrize("fault", [_param(f) for f in CPU_FAULTS])
def test_fault_is_data_and_the_judge_survives(judge: Judge, fault: Asset) -> None:
    result = evaluate(judge, fault)
    outcomes = {EvalOutcome(v) for v in fault.listed("expect")}
    assert result.outcome in outcomes, describe(result)
    assert result.status is result.outcome.status
    assert result.reward == 0.0 and not result.correct
    if "kind" in fault.meta:
        assert result.error is not None and result.error.kind in fault.listed("kind"), describe(result)
        assert result.error.message
    if "issue" in fault.meta:
        assert any(fault.meta["issue"] in (t.issue or "") for t in result.trials), result.trials
    if fault.meta.get("dies") == "yes":
        assert result.wall_s is not None and result.wall_s < DEAD_SANDBOX_NOTICED_S, describe(result)
    if fault.meta.get("forged") == "yes":
        assert '"forged": "by-the-candidate"' in result.sandbox_output
    assert_next_evaluation_unaffected(judge)


def test_statuses_cover_every_failure_outcome() -> None:
    expected = {EvalOutcome(v) for f in CPU_FAULTS if "xfail" not in f.meta for v in f.listed("expect")}
    assert {EvalOutcome.COMPILE_ERROR, EvalOutcome.RUNTIME_ERROR, EvalOutcome.TIMEOUT,
            EvalOutcome.INCORRECT} <= expected
    assert {o.status for o in expected} == {EvalStatus.COMPLETED, EvalStatus.FAILED, EvalStatus.TIMEOUT}


def test_crash_message_names_the_signal(judge: Judge) -> None:
    result = evaluate(judge, asset("faults", "sigsegv_self"))
    assert result.error is not None and "SIGSEGV" in result.error.message


def test_endless_loop_stops_at_the_timeout_not_later(judge: Judge) -> None:
    fault = asset("faults", "endless_loop")
    timeout_s = fault.options().timeout_s
    result = evaluate(judge, fault)
    assert result.outcome is EvalOutcome.TIMEOUT and result.status is EvalStatus.TIMEOUT
    assert result.wall_s is not None and timeout_s <= result.wall_s < timeout_s + 5.0


def test_memory_hog_is_stopped_at_the_limit(judge: Judge) -> None:
    result = evaluate(judge, asset("faults", "memory_hog"))
    assert result.outcome is EvalOutcome.RUNTIME_ERROR, describe(result)
    assert result.error is not None and result.error.kind in ("memory_limit", "out_of_memory")
    assert result.wall_s is not None and result.wall_s < 30


def test_broken_reference_is_infra_error_not_the_candidates_fault(judge: Judge) -> None:
    honest = asset("kernels", "relu_scale")
    result = evaluate(judge, honest, reference=reference_code("broken_forward"))
    assert result.outcome is EvalOutcome.INFRA_ERROR and result.status is EvalStatus.FAILED, describe(result)
    assert result.error is not None and result.error.kind.startswith("reference")
    assert "broken on purpose" in result.error.message
    assert result.reward == 0.0
    assert_next_evaluation_unaffected(judge)


@pytest.mark.parametrize("old, new, named", [
    # a tuple is a list of inputs: judged as before
    ("return [torch.randn(batch_size, dim)]", "return (torch.randn(batch_size, dim),)", None),
    # a bare tensor's rows became the inputs: a (1, N) input was judged as one of shape (N,)
    ("return [torch.randn(batch_size, dim)]", "return torch.randn(batch_size, dim)",
     "get_inputs() returned a Tensor"),
    ("def get_init_inputs():\n    return []", "def get_init_inputs():\n    return None",
     "get_init_inputs() returned None"),
])
def test_a_reference_whose_inputs_are_no_list_is_named(judge: Judge, old: str, new: str,
                                                       named: str | None) -> None:
    honest = asset("kernels", "relu_scale")
    assert old in honest.reference
    result = evaluate(judge, honest, reference=honest.reference.replace(old, new, 1))
    if named is None:
        assert result.outcome is EvalOutcome.OK, describe(result)
        return
    assert result.outcome is EvalOutcome.INFRA_ERROR, describe(result)
    assert result.error is not None and result.error.kind == "reference_error"
    assert named in result.error.message and "not a list of inputs" in result.error.message


def test_several_crashes_in_a_row_leave_the_judge_working(judge: Judge) -> None:
    started = time.monotonic()
    for name in ("os_exit", "segfault_ctypes", "sigsegv_self"):
        result = evaluate(judge, asset("faults", name))
        assert result.outcome is EvalOutcome.RUNTIME_ERROR and result.error is not None
        assert result.error.kind == "crash"
    assert time.monotonic() - started < 3 * DEAD_SANDBOX_NOTICED_S + 10
    assert_next_evaluation_unaffected(judge)


def test_bad_options_raise_config_error_before_any_work(judge: Judge) -> None:
    honest = asset("kernels", "relu_scale")
    for bad in (FAST.replace(num_correct_trials=0), FAST.replace(timeout_s=0.0),
                FAST.replace(reference_backend="jit"), FAST.replace(launch_preroll_us=-1.0),
                FAST.replace(launch_preroll_us=5000.0)):
        with pytest.raises(ConfigError):
            judge.evaluate(EvalRequest(reference_code=honest.reference, kernel_code=honest.code, options=bad))
    assert_next_evaluation_unaffected(judge)


def test_launch_preroll_is_a_gpu_option_that_the_interpreter_ignores(judge: Judge) -> None:
    honest = asset("kernels", "relu_scale")
    r = judge.evaluate(EvalRequest(reference_code=honest.reference, kernel_code=honest.code,
                                   options=FAST.replace(launch_preroll_us=50.0)))
    assert r.outcome is EvalOutcome.OK and r.kernel_timing is not None, r.error


def test_spares_default_and_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    from drkernel.settings import DEFAULT_SPARES, judge_settings_from_env

    assert (DEFAULT_SPARES["cuda"], DEFAULT_SPARES["cpu"]) == (6, 2)
    assert judge_settings_from_env({}).spares is None  # the judge's default for its device
    assert judge_settings_from_env({"DRKERNEL_SPARES": " 4 "}).spares == 4
    for bad in ("0", "65", "-1", "three", "2.5"):
        with pytest.raises(ConfigError, match="DRKERNEL_SPARES"):
            judge_settings_from_env({"DRKERNEL_SPARES": bad})
    monkeypatch.setenv("DRKERNEL_SPARES", "5")  # a Judge itself reads no environment variable
    with Judge(device="cpu", cache_path=None) as j:
        assert j.spares == DEFAULT_SPARES["cpu"]


def test_the_scratch_folder_and_the_fault_hook_are_settings_and_no_sandbox_reads_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: DRKERNEL_SCRATCH_DIR and DRKERNEL_DEBUG_JUDGE_FAULT are read by drkernel/settings.py
    alone; a judge places its sandboxes' folders where its config says, whatever the environment."""
    from drkernel.settings import JudgeSettings, judge_settings_from_env

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {"DRKERNEL_SCRATCH_DIR": f" {scratch} ", "DRKERNEL_DEBUG_JUDGE_FAULT": "compare@/x/once"}
    config = judge_settings_from_env(env)
    assert (config.scratch_dir, config.debug_fault) == (str(scratch), "compare@/x/once")
    assert judge_settings_from_env({}).scratch_dir is None and judge_settings_from_env({}).debug_fault is None
    with pytest.raises(ConfigError, match="scratch_dir.*is not a folder"):
        judge_settings_from_env({"DRKERNEL_SCRATCH_DIR": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="debug_fault.*compare or device_assert"):
        JudgeSettings(debug_fault="explode")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("DRKERNEL_SCRATCH_DIR", str(elsewhere))  # not the judge's to read
    with Judge(device="cpu", cache_path=None, spares=1, scratch_dir=str(scratch)) as j:
        assert j._pool and all(Path(p.workdir).parent == scratch for p in j._pool)
        assert j._ref is not None and Path(j._ref.workdir).parent == scratch
        assert str(scratch) in j._hide  # hidden from every sandbox, as the default scratch is
    assert not list(elsewhere.iterdir())


def test_a_judge_takes_a_config_or_its_fields_not_both() -> None:
    from drkernel.settings import JudgeSettings

    with pytest.raises(TypeError, match="not both"):
        Judge("cpu", JudgeSettings(), spares=1)
    with pytest.raises(TypeError):
        Judge("cpu", no_such_setting=1)
    with pytest.raises(ConfigError, match="judge.spares"):  # checked where every judge's config is
        Judge("cpu", spares=0)


def test_a_fault_marked_once_is_claimed_by_one_judge_only(tmp_path: Path) -> None:
    from drkernel.sandbox.comparator import claim_fault

    assert claim_fault(None) is None and claim_fault("compare") == claim_fault("compare") == "compare"
    once = f"device_assert@{tmp_path / 'once'}"
    assert [claim_fault(once) for _ in range(3)] == ["device_assert", None, None]
    (tmp_path / "target").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "target")  # an existing name, a link or not, is claimed
    assert claim_fault(f"compare@{tmp_path / 'link'}") is None


def test_closed_judge_refuses_work() -> None:
    honest = asset("kernels", "relu_scale")
    j = Judge(device="cpu", cache_path=None, spares=1)
    j.close()
    with pytest.raises(ConfigError):
        j.evaluate(EvalRequest(reference_code=honest.reference, kernel_code=honest.code, options=FAST))


_KILLED_JUDGE = r'''
import sys
from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalRequest
reference, kernel = sys.argv[1], sys.argv[2]
judge = Judge(device="cpu", cache_path=None)
judge.warm()
pids = [judge._zygote.proc.pid, judge._ref.proc.pid, *(p.proc.pid for p in judge._pool)]
print(" ".join(map(str, pids)), flush=True)
judge.evaluate(EvalRequest(reference_code=reference, kernel_code=kernel,
                           options=EvalOptions(static_policy=False, timeout_s=600)))
'''


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def test_nothing_outlives_a_killed_judge() -> None:
    """kill -9 of the judge: its fork server, the reference and every sandbox (the busy one too) die."""
    import subprocess
    import sys

    loop = asset("faults", "endless_loop")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_JUDGE, loop.reference, loop.code],
                            stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(pids) >= 3
        time.sleep(3)  # the candidate is now spinning in its forward
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _running(p)]
