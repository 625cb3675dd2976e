"""Baseline timings: measured once per (problem hash, device, backend, torch version), then reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from drkernel.errors import ConfigError
from drkernel.problems.baselines import BaselineStore, measure_baseline, refresh_baselines
from drkernel.problems.suite import builtin_problem


def test_eager_timings_are_stored_and_reused(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "b.json")
    problems = [builtin_problem("101_ReLU", "cpu"), builtin_problem("108_Matmul", "cpu")]
    first = refresh_baselines(problems, store, device="cpu", trials=3, warmup=1)
    assert [t.problem for t in first] == ["101_ReLU", "108_Matmul"]
    assert all(t.clock == "cpu_wall" and t.device_name == "cpu" and t.median_ms > 0 and t.n == 3
               for t in first)
    reopened = BaselineStore(tmp_path / "b.json")
    again = refresh_baselines(problems, reopened, device="cpu", trials=3)
    assert [t.measured_at for t in again] == [t.measured_at for t in first]  # reused, not re-measured
    forced = refresh_baselines(problems[:1], reopened, device="cpu", trials=2, force=True)
    assert forced[0].measured_at > first[0].measured_at and forced[0].n == 2
    data = json.loads((tmp_path / "b.json").read_text())
    key = next(iter(data["entries"]))
    assert key.endswith(f"|cpu|eager|torch-{torch.__version__}") and len(data["entries"]) == 2


def test_a_resized_problem_gets_its_own_entry(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "b.json")
    cpu = builtin_problem("101_ReLU", "cpu")
    store.put(measure_baseline(cpu, trials=1, warmup=0))
    assert store.get(cpu, "cpu", "eager") is not None
    assert store.get(builtin_problem("101_ReLU", "gpu"), "cpu", "eager") is None
    assert store.get(cpu, "cpu", "compile") is None


def test_compile_backend_wraps_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = []

    def fake_compile(model: torch.nn.Module) -> torch.nn.Module:  # inductor takes minutes on 2 CPU cores
        compiled.append(type(model).__name__)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    timing = measure_baseline(builtin_problem("101_ReLU", "cpu"), backend="compile", trials=2, warmup=0)
    assert compiled == ["Model"] and timing.backend == "compile" and timing.median_ms > 0


@pytest.mark.gpu
def test_compile_backend_on_gpu() -> None:
    timing = measure_baseline(builtin_problem("203_Gemm_GELU_LayerNorm", "gpu"), "cuda", "compile", trials=5)
    assert timing.clock == "cuda_event" and timing.device_name != "cpu" and timing.median_ms > 0


def test_bad_arguments_and_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="backend"):
        measure_baseline(builtin_problem("101_ReLU", "cpu"), backend="jit")
    with pytest.raises(ConfigError, match="trials"):
        measure_baseline(builtin_problem("101_ReLU", "cpu"), trials=0)
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(ConfigError, match="not a baseline store"):
        BaselineStore(tmp_path / "bad.json")


def test_a_store_that_cannot_be_read_or_written_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "list.json").write_text('{"entries": [1, 2]}')
    for name in ("binary.json", "list.json"):
        with pytest.raises(ConfigError, match="not a baseline store"):
            BaselineStore(tmp_path / name)
    (tmp_path / "folder").mkdir()
    with pytest.raises(ConfigError, match="is a folder"):
        BaselineStore(tmp_path / "folder")
    (tmp_path / "file").write_text("")
    store = BaselineStore(tmp_path / "file" / "b.json")  # its folder cannot be made
    with pytest.raises(ConfigError, match="cannot write"):
        refresh_baselines([builtin_problem("101_ReLU", "cpu")], store, trials=1, warmup=0)


def test_a_put_leaves_a_file_named_like_its_old_temporary_file_alone(tmp_path: Path) -> None:
    """put() wrote through `<store>.tmp`, a fixed name: a file of that name beside the store was
    overwritten and renamed away, and two writers of one store shared it."""
    (tmp_path / "b.tmp").write_text("someone else's\n")
    store = BaselineStore(tmp_path / "b.json")
    store.put(measure_baseline(builtin_problem("101_ReLU", "cpu"), trials=1, warmup=0))
    assert (tmp_path / "b.tmp").read_text() == "someone else's\n"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".b.json.lock", "b.json", "b.tmp"]  # the writers' lock beside the store
    assert len(BaselineStore(tmp_path / "b.json").entries()) == 1


def test_a_timing_reused_for_another_problem_of_the_same_code_bears_its_name(tmp_path: Path) -> None:
    """Entries are keyed by the code's hash: two files of one reference (a copy, a renamed file) share
    one timing, but each row names the problem it was asked for."""
    from dataclasses import replace

    relu = builtin_problem("101_ReLU", "cpu")
    copy = replace(relu, name="L1/2_ReLU_copy")
    store = BaselineStore(tmp_path / "b.json")
    timings = refresh_baselines([relu, copy], store, trials=1, warmup=0)
    assert [t.problem for t in timings] == ["101_ReLU", "L1/2_ReLU_copy"]
    assert timings[0].measured_at == timings[1].measured_at  # measured once


def test_a_damaged_store_entry_is_named_not_blamed_on_the_reference(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from drkernel.cli import main

    path = tmp_path / "b.json"
    store = BaselineStore(path)
    refresh_baselines([builtin_problem("101_ReLU", "cpu")], store, trials=1, warmup=0)
    data = json.loads(path.read_text())
    key = next(iter(data["entries"]))
    for damage in ({k: v for k, v in data["entries"][key].items() if k != "median_ms"},
                   {**data["entries"][key], "median_ms": "fast"}, 3):
        path.write_text(json.dumps({"version": 1, "entries": {key: damage}}))
        with pytest.raises(ConfigError, match=f"b.json: entry {key!r} is not a baseline timing"):
            BaselineStore(path)
        assert main(["suite", "baselines", "builtin:cpu", "--only", "101_ReLU", "--store", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is not a baseline timing" in err[0] and "reference failed" not in err[0]


def test_a_store_entry_with_a_field_of_its_own_is_still_its_timing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An entry with a field BaselineTiming lacks (a note by hand, another version's) was a TypeError
    out of the store, said as 'the reference failed' for the problem it keys, exit 1."""
    from drkernel.cli import main

    path = tmp_path / "b.json"
    relu = builtin_problem("101_ReLU", "cpu")
    first = refresh_baselines([relu], BaselineStore(path), trials=1, warmup=0)[0]
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        entry["note"] = "timed on a quiet host"
    path.write_text(json.dumps(data))
    assert BaselineStore(path).get(relu, "cpu", "eager") == first
    assert main(["suite", "baselines", "builtin:cpu", "--only", "101_ReLU", "--store", str(path)]) == 0
    assert "reference failed" not in capsys.readouterr().err


def test_two_runs_sharing_a_store_keep_each_others_timings(tmp_path: Path) -> None:
    """The default store is one file for every run of the user (cuda:0 and cuda:1 at once, say): a put
    wrote this run's view of it, dropping what another run had stored since this one opened it."""
    relu, matmul = builtin_problem("101_ReLU", "cpu"), builtin_problem("108_Matmul", "cpu")
    first, second = BaselineStore(tmp_path / "b.json"), BaselineStore(tmp_path / "b.json")
    first.put(measure_baseline(relu, trials=1, warmup=0))
    second.put(measure_baseline(matmul, trials=1, warmup=0))
    reopened = BaselineStore(tmp_path / "b.json")
    assert reopened.get(relu, "cpu", "eager") is not None and reopened.get(matmul, "cpu", "eager") is not None


def test_a_put_waits_for_another_writer_of_the_store_and_keeps_the_lock_file(tmp_path: Path) -> None:
    """put() waits while another run holds the store's lock (one holder at a time), then stores."""
    import threading
    import time

    from drkernel.files import held_lock

    store = BaselineStore(tmp_path / "b.json")
    timing = measure_baseline(builtin_problem("101_ReLU", "cpu"), trials=1, warmup=0)
    writer = threading.Thread(target=store.put, args=(timing,))
    with held_lock(tmp_path / ".b.json.lock", wait=False):  # another run's put, under way
        writer.start()
        time.sleep(0.3)
        assert writer.is_alive() and not (tmp_path / "b.json").exists()
    writer.join(30)
    assert not writer.is_alive() and len(BaselineStore(tmp_path / "b.json").entries()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.json.lock", "b.json"]


@pytest.mark.parametrize("other", ['{"format": "drkernel-survey-v1", "rows": []}', "{}", '{"version": 1}',
                                   '[]', '"entries"'])
def test_another_json_file_given_as_the_store_is_refused_and_kept(
        other: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--store survey.json` (any JSON object without "entries") read as an empty store, and the first
    timing replaced the file with a store of one entry, exit 0: the survey was gone."""
    from drkernel.cli import main

    path = tmp_path / "survey.json"
    path.write_text(other)
    with pytest.raises(ConfigError, match="survey.json: not a baseline store"):
        BaselineStore(path)
    assert main(["suite", "baselines", "builtin:cpu", "--only", "101_ReLU", "--store", str(path),
                 "--trials", "1", "--warmup", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a baseline store" in err[0], err
    assert path.read_text() == other


_HOLD = ("import sys, time\nfrom drkernel.sandbox.devicelock import candidate_alive, timing_lock\n"
         "lock = timing_lock('cuda:0') if sys.argv[1] == 'timing' else candidate_alive()\n"
         "with lock:\n    print('held', flush=True)\n    time.sleep(float(sys.argv[2]))\n")


@pytest.mark.parametrize("held", ["timing", "candidate"])
def test_a_baseline_is_timed_only_once_the_gpu_and_the_host_are_its_own(
        held: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Surveys and judges sharing a GPU take turns timing it (sandbox/devicelock.py); a baseline timed
    beside another's window would skew both. It waits, as the judge's reference timing does, for another
    process's exclusive hold of the device and for the host's live candidates (the CPU stands in for
    GPU 7 here: the lock is the real one, only its key is made up)."""
    import subprocess
    import sys
    import time

    from drkernel.problems import baselines
    from drkernel.sandbox import devicelock

    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.setattr(devicelock, "gpu_key", lambda device: "gpu-7")
    timed: list[float] = []
    time_call = baselines._time_call

    def recorded(fn: object, inputs: list[object], cuda: bool) -> float:
        timed.append(time.monotonic())
        return time_call(fn, inputs, cuda)

    monkeypatch.setattr(baselines, "_time_call", recorded)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, held, "1.5"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said = time.monotonic()  # the holder lets go 1.5 s after it said so, not sooner
        timing = measure_baseline(builtin_problem("101_ReLU", "cpu"), trials=3, warmup=1)
        assert holder.wait(timeout=10) == 0
    finally:
        holder.kill()
    assert timing.n == 3 and len(timed) == 3
    assert timed[0] - said > 1.3, "a call was timed while the other process held the lock"


def test_the_default_store_lives_in_drkernels_cache_folder_under_xdg_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store without --store sat in ~/.cache whatever $XDG_CACHE_HOME said, beside a timing cache that
    honours it; both are in settings.cache_folder now."""
    from drkernel.problems.baselines import default_store_path
    from drkernel.settings import default_timing_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "drkernel" / "baselines.json"
    assert default_store_path().parent == Path(default_timing_cache()).parent
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # the XDG spec: a relative path is ignored
    assert default_store_path() == Path.home() / ".cache" / "drkernel" / "baselines.json"
