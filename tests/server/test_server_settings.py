"""Judges per GPU for `drkernel serve`: the setting, its checks, and the executor it builds."""

from __future__ import annotations

import math
import pickle
from typing import Any

import pytest

from drkernel.cli import main
from drkernel.errors import ConfigError
from drkernel.executors.judge_host import SandboxJudge
from drkernel.executors.local import LocalExecutor
from drkernel.server.app import default_executor
from drkernel.server.settings import Settings
from drkernel.settings import JudgeSettings, default_timing_cache


def test_judges_per_gpu_comes_from_the_environment_and_is_checked() -> None:
    assert Settings.from_env({"DRKERNEL_JUDGES_PER_GPU": "3"}).judges_per_gpu == 3
    assert Settings.from_env({}).judges_per_gpu is None and Settings.from_env({}).gpu_judges == 4
    assert Settings(executor="ray").gpu_judges == 1  # a Ray actor holds a whole GPU
    with pytest.raises(ConfigError, match="judges_per_gpu: 0 not in 1..16"):
        Settings(judges_per_gpu=0)
    with pytest.raises(ConfigError, match="local executor"):
        Settings(judges_per_gpu=2, executor="ray")
    with pytest.raises(ConfigError, match="DRKERNEL_JUDGES_PER_GPU='two'"):
        Settings.from_env({"DRKERNEL_JUDGES_PER_GPU": "two"})


@pytest.mark.parametrize("k", [1, 3])
def test_serve_builds_k_judges_per_gpu_with_divided_caps(monkeypatch: pytest.MonkeyPatch, k: int,
                                                         tmp_path: Any) -> None:
    monkeypatch.setattr(LocalExecutor, "_init_pool",
                        lambda self, slots, first_ready=False: None)  # no judge starts
    monkeypatch.setattr("drkernel.executors.local.reap_orphan_judges", lambda: None)
    settings = Settings(judges_per_gpu=k, devices=("cuda:0", "cuda:1"), db_path=str(tmp_path / "t.db"))
    executor = default_executor(settings)
    assert isinstance(executor, LocalExecutor)
    config, made = executor.config, executor._factory
    assert config.judges_per_gpu == k and config.devices == ("cuda:0", "cuda:1")
    assert config.ready == "first"  # serve answers once one judge is up
    assert isinstance(made, SandboxJudge) and made.share == k
    assert made.config.retries == 1  # a judge fault is retried in the judge; the pool does not again
    # each of the k judges gets 1/k of a lone judge's candidate memory cap; the reference's is not
    # divided (a trusted ceiling, not a partition: divided, an honest large problem was blamed, run BK)
    assert made.config.candidate_gpu_fraction == pytest.approx(0.6 / k)
    assert made.config.reference_gpu_fraction == pytest.approx(0.3)
    # the task store is hidden from every sandbox, through the config the judges are built from
    assert str(tmp_path / "t.db") in made.config.hide and str(tmp_path / "t.db-wal") in made.config.hide


def test_the_judges_settings_come_from_the_environment_into_the_judges_config() -> None:
    env = {"DRKERNEL_INSECURE": "1", "DRKERNEL_SANDBOX_HIDE": "/a:/b", "DRKERNEL_SPARES": " 4 "}
    cfg = Settings.from_env(env).judge_settings
    assert (cfg.insecure, cfg.hide, cfg.spares) == (True, ("/a", "/b"), 4)
    assert Settings.from_env({}).judge_settings == JudgeSettings()
    for bad in ("0", "65", "-1", "three", "2.5"):
        with pytest.raises(ConfigError, match="DRKERNEL_SPARES"):
            Settings.from_env({"DRKERNEL_SPARES": bad})
    assert pickle.loads(pickle.dumps(SandboxJudge(cfg, 2))).config == cfg.shared(2)  # travels pickled


def test_serve_passes_insecure_to_its_judges_without_writing_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import os

    seen: list[Settings] = []

    def fake_executor(settings: Settings) -> Any:
        seen.append(settings)
        raise ConfigError("stop here")

    monkeypatch.setattr("drkernel.server.app.default_executor", fake_executor)
    monkeypatch.delenv("DRKERNEL_INSECURE", raising=False)
    monkeypatch.delenv("DRKERNEL_SANDBOX_HIDE", raising=False)
    assert main(["serve", "--insecure", "--db", str(tmp_path / "x.db")]) == 2
    assert seen and seen[0].judges().insecure
    assert "DRKERNEL_INSECURE" not in os.environ and "DRKERNEL_SANDBOX_HIDE" not in os.environ


def test_a_bad_judges_per_gpu_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--judges-per-gpu", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["drkernel serve: serve.judges_per_gpu: 0 not in 1..16"]


def test_serve_builds_its_executor_from_the_one_table() -> None:
    from drkernel.executors.ray import RayExecutor
    from drkernel.server.app import serve_executor_config

    settings = Settings(executor="ray", ray_address="auto", num_workers=2, heartbeat_timeout_s=3.0,
                        deadline_grace_s=5.0, db_path=":memory:")
    ray = serve_executor_config(settings)
    assert ray == RayExecutor.Config(address="auto", num_workers=2, heartbeat_timeout_s=3.0,
                                     heartbeat_s=1.0, deadline_grace_s=5.0,
                                     judge=JudgeSettings(cache_path=default_timing_cache()))
    local = serve_executor_config(Settings(devices=("cuda:0", "cuda:1", "cuda:2"), num_workers=2,
                                           isolation="thread"))
    assert isinstance(local, LocalExecutor.Config)
    assert local.devices == ("cuda:0", "cuda:1") and local.isolation == "thread"
    assert local.scrub_env == ("DRKERNEL_AUTH_TOKEN",)
    for name in ("http", "fake"):  # serve's vocabulary is narrower than the table's
        with pytest.raises(ConfigError, match=f"serve.executor: '{name}' not in local\\|ray"):
            Settings(executor=name)


@pytest.mark.parametrize(("field", "value"), [
    ("retention_s", -1.0), ("retention_s", 0.0), ("retention_s", math.nan), ("evaluate_wait_s", -1.0),
    ("evaluate_wait_s", math.nan), ("heartbeat_timeout_s", math.nan), ("deadline_grace_s", math.nan),
    ("dedupe_window_s", math.nan)])
def test_a_negative_or_nan_duration_is_refused_by_name(field: str, value: float) -> None:
    """`serve --retention -1` deleted every result as it finished (a client polling /results got 404);
    NaN passed every check, since each compared with `<`."""
    with pytest.raises(ConfigError, match=f"serve.{field}: "):
        Settings(**{field: value})  # type: ignore[arg-type]
    Settings(retention_s=math.inf, evaluate_wait_s=0.0, dedupe_window_s=0.0)  # keep all; no wait; off


def test_serve_help_says_which_flags_have_a_variable(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from drkernel.server import cli as serve_cli
    from drkernel.server.settings import _ENV

    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    serve = next(a for a in parser._subparsers._group_actions[0].choices.values())  # type: ignore[union-attr]
    fields = {field for field, _ in _ENV.values()} | {"insecure"}  # DRKERNEL_INSECURE: drkernel/settings.py
    without = sorted(a.option_strings[0] for a in serve._actions if a.option_strings
                     and a.dest not in fields and a.dest != "help")
    assert without  # --isolation, --devices, ... have no variable
    assert "Every flag can also be set" not in text, without


def test_workers_on_the_cpu_devices_are_that_many_judges() -> None:
    """`serve --devices cpu --workers 4` started one CPU judge: --workers only cut a GPU list."""
    from drkernel.server.app import serve_executor_config

    config = serve_executor_config(Settings(devices=("cpu",), num_workers=4, db_path=":memory:"))
    assert isinstance(config, LocalExecutor.Config) and config.devices == ("cpu",) * 4
    two = serve_executor_config(Settings(devices=("cpu", "cpu"), db_path=":memory:"))
    assert isinstance(two, LocalExecutor.Config) and two.devices == ("cpu", "cpu")


def test_the_servers_judges_share_one_timing_cache(tmp_path: Any) -> None:
    """Each judge of `serve` kept its reference times in memory: four judges timed each problem's reference
    (and measured the device's peaks) four times, each time stopping every candidate on the host."""
    import os

    assert Settings().judges().cache_path == default_timing_cache()  # the file `drkernel eval` keeps too
    own = str(tmp_path / "t.sqlite")
    assert Settings.from_env({"DRKERNEL_TIMING_CACHE": own}).judges().cache_path == own
    assert Settings(timing_cache="none").judges().cache_path is None  # each judge its own, in memory
    assert Settings(timing_cache="rel.sqlite").judges().cache_path == os.path.abspath("rel.sqlite")
    kept = Settings(judge_settings=JudgeSettings(cache_path=own), timing_cache="none")
    assert kept.judges().cache_path == own  # a judge config that names one keeps it
    for bad in (str(tmp_path), " "):
        with pytest.raises(ConfigError, match="serve.timing_cache: .* is a folder or empty"):
            Settings(timing_cache=bad)


def test_one_function_owns_the_default_timing_cache_and_it_honours_xdg_cache_home() -> None:
    """`drkernel eval` (sandbox/judge.py default_cache_path) and `serve` (settings.py) each spelt the
    default, ~/.cache alone, whatever $XDG_CACHE_HOME said; settings.default_timing_cache is the one."""
    import os
    from pathlib import Path

    import drkernel.sandbox.judge

    assert not hasattr(drkernel.sandbox.judge, "default_cache_path")
    home = str(Path.home() / ".cache" / "drkernel" / "reference_timings.sqlite")
    assert default_timing_cache({}) == home
    assert default_timing_cache({"XDG_CACHE_HOME": "/xdg/c"}) == "/xdg/c/drkernel/reference_timings.sqlite"
    for ignored in ("", "relative/cache"):  # the XDG spec: empty means unset, a relative path is invalid
        assert default_timing_cache({"XDG_CACHE_HOME": ignored}) == home
    assert default_timing_cache() == default_timing_cache(os.environ)


def test_serve_takes_timing_cache_from_its_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    seen: list[Settings] = []

    def fake_executor(settings: Settings) -> Any:
        seen.append(settings)
        raise ConfigError("stop here")

    monkeypatch.setattr("drkernel.server.app.default_executor", fake_executor)
    cache = str(tmp_path / "timings.sqlite")
    main(["serve", "--db", str(tmp_path / "s.db"), "--timing-cache", cache])
    assert seen and seen[0].judges().cache_path == cache
    assert main(["serve", "--db", str(tmp_path / "s.db"), "--timing-cache", str(tmp_path)]) == 2


def test_a_timing_cache_that_cannot_be_made_is_one_line_before_any_judge(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A home that is read-only (a container's) made every judge fail at its start; serve now says so once."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["serve", "--db", str(tmp_path / "s.db"), "--timing-cache", str(blocker / "t.sqlite"),
                 "--port", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(f"drkernel serve: reference timing cache {blocker / 't.sqlite'}: "
                                            "cannot open it"), err
    assert err[-1].endswith("(give another file with --timing-cache, or none)"), err[-1]


@pytest.mark.parametrize("flag", ["--db", "--host"])
def test_an_empty_db_or_host_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """`serve --db "$DB"` with DB unset served from a temporary file SQLite deletes (every task lost at
    a restart) and hid the working folder from the sandboxes; `--host ""` warned that it served beyond
    loopback without a token, then failed as a name that does not resolve."""
    name = "db_path" if flag == "--db" else "host"
    with pytest.raises(ConfigError, match=f"serve.{name}: empty"):
        Settings(**{name: " "})  # type: ignore[arg-type]
    assert main(["serve", "--judge", "fake", flag, ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"drkernel serve: serve.{name}: empty"), err


@pytest.mark.parametrize("value", [1e-9, 0.1])
def test_a_heartbeat_timeout_shorter_than_the_heartbeats_is_refused(value: float) -> None:
    """`serve --heartbeat-timeout 1e-9` started, and then replaced every judge as soon as it was up
    ('no heartbeat for 1e-09 s'), for ever: no task was ever judged."""
    with pytest.raises(ConfigError, match="serve.heartbeat_timeout_s: .* below 0.5 s"):
        Settings(heartbeat_timeout_s=value)
    assert Settings(heartbeat_timeout_s=0.5).heartbeat_timeout_s == 0.5


def test_serve_refuses_more_cpu_judges_than_the_client_commands_do() -> None:
    """`serve --devices cpu --workers 1000` started 1000 judge processes, each importing torch, where
    the client commands refuse more than 4 judges per core by name."""
    import os

    from drkernel.server.app import serve_executor_config

    cores = os.cpu_count() or 1
    with pytest.raises(ConfigError, match=f"--workers {4 * cores + 1}: more than 4 judges per CPU core"):
        serve_executor_config(Settings(devices=("cpu",), num_workers=4 * cores + 1, db_path=":memory:"))
    fits = serve_executor_config(Settings(devices=("cpu",), num_workers=4 * cores, db_path=":memory:"))
    assert isinstance(fits, LocalExecutor.Config) and len(fits.devices or ()) == 4 * cores


def test_a_gpu_named_twice_in_devices_is_refused() -> None:
    """`serve --devices cuda:0,cuda:0` built a worker per entry, each --judges-per-gpu judges, for the
    GPU's --judges-per-gpu lock slots: half the judges waited for the GPU until their start failed."""
    for devices in (("cuda:0", "cuda:0"), ("cuda:1", "cuda:01")):
        with pytest.raises(ConfigError, match="names a GPU twice"):
            Settings(devices=devices)
    assert Settings(devices=("cpu", "cpu")).devices == ("cpu", "cpu")  # two CPU judges
    assert Settings(devices=("cuda:0", "cuda:1")).devices == ("cuda:0", "cuda:1")


@pytest.mark.parametrize("token", ["s3cret\n", " s3cret", "s3\u00e9cret"])
def test_a_token_no_header_can_carry_is_refused_at_start(token: str) -> None:
    """DRKERNEL_AUTH_TOKEN read from a file with its newline started a server on which every request but
    /health was a 401: no Authorization header can carry it."""
    with pytest.raises(ConfigError, match="DRKERNEL_AUTH_TOKEN: starts or ends with a space"):
        Settings.from_env({"DRKERNEL_AUTH_TOKEN": token})
    assert Settings.from_env({"DRKERNEL_AUTH_TOKEN": "s3cret token"}).auth_token == "s3cret token"


def test_judges_per_gpu_without_a_gpu_says_it_sets_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """`serve --devices cpu --judges-per-gpu 4` (or on a host without a GPU) started one CPU judge, the
    flag dropped without a word."""
    import logging

    from drkernel.server.app import serve_executor_config

    with caplog.at_level(logging.WARNING, logger="drkernel.server.app"):
        config = serve_executor_config(Settings(devices=("cpu",), judges_per_gpu=4, db_path=":memory:"))
    assert isinstance(config, LocalExecutor.Config) and config.devices == ("cpu",)
    assert [r.getMessage() for r in caplog.records] == [
        "--judges-per-gpu 4 sets nothing here: no GPU among the devices (CPU judges: 1; --workers N sets "
        "how many)"]
