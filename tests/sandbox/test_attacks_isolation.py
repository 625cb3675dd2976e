"""Attacks on the sandbox's isolation (issue 13, classes 1, 3, 5, 6, 7), through one real CPU judge.

Each attack runs arbitrary Python in its sandbox with the static gate off: the barrier under test is
the isolation (namespaces, a uid of its own, the judge's checks of the files it reads), not the
gate. These run wherever the judge can isolate sandboxes (as root on Linux: CI and the GPU host).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from drkernel.errors import ConfigError
from drkernel.sandbox.judge import Judge
from drkernel.sandbox.plumbing import isolation
from drkernel.settings import judge_settings_from_env
from drkernel.types import EvalOutcome, EvalRequest, EvalResult
from tests.sandbox.corpus import ASSETS, FAST, asset, reference_code

_WHY_NOT = isolation.probe()
pytestmark = pytest.mark.skipif(_WHY_NOT is not None,
                                reason=f"this machine cannot isolate sandboxes: {_WHY_NOT}")

OPTIONS = FAST.replace(static_policy=False)


def attack(name: str, **params: object) -> str:
    code = (ASSETS / "attacks" / f"{name}.py").read_text()
    for key, value in params.items():
        code = code.replace(f"__{key.upper()}__", str(value))
    return code


def evaluate(judge: Judge, code: str) -> EvalResult:
    return judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                      options=OPTIONS))


def describe(r: EvalResult) -> str:
    return (f"{r.outcome.value} error={r.error} trials={[t.issue for t in r.trials]} "
            f"output={r.sandbox_output[-800:]}")


@pytest.fixture(scope="module")
def cache_dir() -> Iterator[Path]:
    """A cache folder outside /tmp (which every sandbox has covered anyway), as a judge's would be."""
    folder = Path.home() / ".cache" / f"drkernel-attack-test-{uuid.uuid4().hex[:8]}"
    yield folder
    for p in sorted(folder.glob("*")):
        p.unlink()
    if folder.exists():
        folder.rmdir()


@pytest.fixture(scope="module")
def judge(cache_dir: Path) -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=cache_dir / "timings.sqlite", spares=1) as j:
        yield j


def test_the_judge_isolates_by_default(judge: Judge) -> None:
    honest = asset("kernels", "relu_scale")
    r = evaluate(judge, honest.code)
    assert r.outcome is EvalOutcome.OK, describe(r)
    assert r.isolation == "namespaces" and r.to_dict()["isolation"] == "namespaces"


def test_arbitrary_python_sees_nothing_of_the_host(judge: Judge, tmp_path: Path, cache_dir: Path) -> None:
    """Class 1/7: past the gate, the candidate sees no process, file, folder or network of the host."""
    secret = tmp_path / "judge-secret.txt"
    secret.write_text("the judge's")
    secret.chmod(0o644)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        secrets = [str(secret), str(cache_dir / "timings.sqlite"), f"{cache_dir}/timings.sqlite-wal"]
        from drkernel.sandbox.plumbing.isolation import needed_paths

        code = attack("escape_probe", secrets=json.dumps(secrets), port=listener.getsockname()[1],
                      exposed=json.dumps(list(needed_paths())))
        r = evaluate(judge, code)
    finally:
        listener.close()
    assert r.outcome is EvalOutcome.OK, describe(r)
    report = next(line for line in r.sandbox_output.splitlines() if line.startswith("ISOLATION"))
    assert "'pid': 2" in report and "'procs': 2" in report and "'interfaces': ['lo']" in report, report


def test_a_process_that_left_its_group_dies_with_the_sandbox(judge: Judge) -> None:
    """Class 6: double fork + setsid; nothing of it runs once the verdict is in."""
    marker = str(uuid.uuid4().int)[:12]
    r = evaluate(judge, attack("double_fork_escape", marker=marker))
    assert r.outcome is EvalOutcome.OK, describe(r)
    deadline = time.monotonic() + 3
    while (alive := _with_marker(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, f"escaped processes still run: {alive}"


def _with_marker(marker: str) -> list[int]:
    found = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    with open(f"/proc/{p}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                            found.append(int(p))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_linked_output_files_are_refused(judge: Judge, how: str) -> None:
    """Class 3: a link where an output file should be is never followed; the verdict is incorrect."""
    r = evaluate(judge, attack("symlink_outputs", how=how))
    assert not r.correct and r.reward == 0.0, describe(r)
    issues = " ".join(str(t.issue) for t in r.trials)
    assert ("symbolic link" if how == "symlink" else "hard link") in issues, describe(r)
    assert "drkernel-reference-" not in r.sandbox_output  # it never found the reference's folder


def test_the_timing_cache_is_out_of_reach(judge: Judge, cache_dir: Path) -> None:
    """Class 5: the sandbox finds no cache to poison; what the judge stored stays as it was."""
    honest = asset("kernels", "relu_scale")
    first = evaluate(judge, honest.code)
    assert first.outcome is EvalOutcome.OK, describe(first)
    db = cache_dir / "timings.sqlite"
    assert db.stat().st_mode & 0o777 == 0o600

    def rows() -> list[tuple[str, str]]:
        with sqlite3.connect(db) as c:
            return sorted(c.execute("SELECT key, stats FROM reference_timing").fetchall())

    before = rows()
    assert before
    r = evaluate(judge, attack("cache_poison", cache=db))
    assert "POISONED" not in r.sandbox_output, describe(r)
    assert "not reached" in r.sandbox_output, describe(r)  # it did try
    assert rows() == before
    again = evaluate(judge, honest.code)
    assert again.reference_ms == first.reference_ms


def test_a_link_in_place_of_the_status_file_is_not_followed(judge: Judge, tmp_path: Path) -> None:
    """The fork server (root) records a dead sandbox's status in its folder: never through a link."""
    victim = tmp_path / "judge-file"
    victim.write_text("intact")
    r = evaluate(judge, attack("status_file_link", victim=victim))
    assert r.outcome is EvalOutcome.OK, describe(r)
    time.sleep(0.5)  # the fork server reaps the killed sandbox and writes its status
    assert victim.read_text() == "intact"


def test_the_judge_refuses_to_start_without_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Class 7: where the machine cannot isolate sandboxes, no judge starts (a clear error), unless
    told insecure; an insecure judge's every result says so."""
    monkeypatch.setattr(isolation, "probe", lambda hide=None: "no namespaces here (test)")
    with pytest.raises(ConfigError, match="no namespaces here.*insecure"):
        Judge(device="cpu", cache_path=None, spares=1)
    with pytest.raises(ConfigError, match="fork server"):
        Judge(device="cpu", cache_path=None, spares=1, fork_server=False)
    monkeypatch.setenv("DRKERNEL_INSECURE", "1")  # read by the commands, into the judge's config
    with Judge.from_config(judge_settings_from_env(spares=1), "cpu") as j:
        honest = asset("kernels", "relu_scale")
        r = evaluate(j, honest.code)
    assert r.outcome is EvalOutcome.OK, describe(r)
    assert r.isolation == "none" and EvalResult.from_dict(r.to_dict()).isolation == "none"


@pytest.mark.skipif(not isolation.seccomp_available(), reason="no seccomp filter for this architecture")
def test_the_kernels_escape_hatches_are_shut(judge: Judge) -> None:
    """Beyond class 1/7: system calls that container escapes use are refused; fork, exec, threads work."""
    r = evaluate(judge, attack("kernel_surface"))
    assert r.outcome is EvalOutcome.OK, describe(r)
    report = next(line for line in r.sandbox_output.splitlines() if line.startswith("SURFACE"))
    calls = dict(item.split("=", 1) for item in report.split()[1:])
    for name in ("ptrace", "process_vm_readv", "mount", "open_by_handle_at", "io_uring_setup", "keyctl",
                 "init_module", "bpf", "userfaultfd", "setns", "pivot_root", "unshare_user"):
        assert calls[name] == "-1/1", f"{name}: {calls[name]} (want -1/EPERM); {report}"
    assert calls["thread"] == "1" and calls["exec"] == "0", report


def test_a_sandbox_makes_its_scratch_files_in_its_own_tmpdir(judge: Judge) -> None:
    """The fork server imports torch (and, for GPU sandboxes, torch._dynamo) before it forks, and
    those imports cache tempfile's folder: the fork server's own, which the sandbox cannot see. Triton's
    CUDA driver makes a scratch folder with tempfile at a sandbox's first launch, so at 1841033 every GPU
    verdict was a FileNotFoundError (run Z). The sandbox must make its scratch files in its TMPDIR."""
    r = evaluate(judge, attack("tempdir_probe"))
    assert r.outcome is EvalOutcome.OK, describe(r)
    lines = [line.split(" ", 1)[1] for line in r.sandbox_output.splitlines() if line.startswith("TEMPDIR ")]
    assert lines, describe(r)
    for line in lines:  # one per sandbox that loaded the module
        cached, env, made_in = json.loads(line)
        assert cached == env == made_in and "drkernel-zygote-" not in cached, line


def test_no_link_planted_in_the_sandbox_folder_is_followed(judge: Judge, tmp_path: Path) -> None:
    """Class 1 of round 2: the submission replaces its own file with a link to a host file and puts
    links to a host folder in its folder. The judge writes the submission again for each held-out
    shape, removes outputs and removes the folder, as root: none of it reaches the victims."""
    victim = tmp_path / "site-packages" / "drkernel-victim.pth"
    victim.parent.mkdir()
    victim.write_text("intact")
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir()
    (victim_dir / "keep.txt").write_text("intact")
    code = attack("planted_links", victim_file=victim, victim_dir=victim_dir)
    options = OPTIONS.replace(num_correct_trials=1)
    r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                   options=options, shape_variants=["batch_size = 3", "dim = 100"]))
    assert victim.read_text() == "intact"
    assert (victim_dir / "keep.txt").read_text() == "intact"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["drkernel-victim.pth", "keep.txt",
                                                             "site-packages", "victim-dir"]
    assert r.sandbox_output.count("PLANTED submission.py") >= 2, describe(r)  # at every load
    assert r.outcome is EvalOutcome.OK, describe(r)
    assert r.shape_variants_passed == r.shape_variants_total == 2, r.shape_variant_issues


@pytest.mark.parametrize("own_filesystem", [True, False], ids=["bounded", "retried_alone"])
def test_a_submission_that_fills_the_shared_scratch_has_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_filesystem: bool) -> None:
    """Class 3: the submission fills the filesystem its folder is on, where the reference's folder is
    too (a 48 MiB tmpfs stands for the scratch). Two layers hold. Bounded: its folder is a filesystem
    of its own (`disk_limit_mb`, here 32 MiB): it fills that alone, the reference never notices, and
    its own outputs then cannot be written: its failure. Retried alone (no filesystem of its own): the
    reference's op fails (no space), is run again with the submission's sandbox gone and passes: the
    submission's failure, never an infra_error."""
    import subprocess

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=1777", "tmpfs", str(scratch)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with Judge(device="cpu", cache_path=None, spares=1, disk_limit_mb=32 if own_filesystem else 0,
                   scratch_dir=str(scratch)) as j:
            r = evaluate(j, attack("fill_scratch"))
            assert r.outcome is EvalOutcome.RUNTIME_ERROR and r.reward == 0.0, describe(r)
            assert r.error is not None
            if own_filesystem:
                assert "No space left" in r.error.message, describe(r)
                assert r.error.kind != "resource_exhaustion", describe(r)
                assert r.trials == []  # its own outputs could not be written
                assert os.statvfs(scratch).f_bfree * os.statvfs(scratch).f_frsize > 40 << 20
            else:
                assert r.error.kind == "resource_exhaustion", describe(r)
                assert "No space left" in r.error.message
                assert "passed with that sandbox gone" in r.error.message
            again = evaluate(j, asset("kernels", "relu_scale").code)  # the judge goes on
            assert again.outcome is EvalOutcome.OK, describe(again)
        assert not [p for p in scratch.iterdir()]  # every sandbox's filesystem unmounted and removed
    finally:
        subprocess.run(["umount", "-l", str(scratch)], check=False)


def test_a_busy_first_candidate_does_not_reach_the_cached_reference_time(tmp_path: Path) -> None:
    """Class 4: the first candidate of a problem keeps every CPU busy with child processes from its
    import on. The reference's time, cached for every later candidate, was measured before that:
    while no candidate process was alive on the host (the entry says so, and when)."""
    import datetime

    cache = tmp_path / "timings.sqlite"
    with Judge(device="cpu", cache_path=cache, spares=1) as j:
        r = j.evaluate(EvalRequest(reference_code=reference_code("relu_scale"),
                                   kernel_code=attack("busy_children", children=2),
                                   options=OPTIONS))
        later = evaluate(j, asset("kernels", "relu_scale").code)
    assert r.outcome is EvalOutcome.OK, describe(r)
    busy_from = float(next(line.split()[-1] for line in r.sandbox_output.splitlines()
                           if line.startswith("BUSY FROM")))
    timing = r.reference_timing
    assert timing is not None and timing.measured_alone is True and timing.measured_at
    measured = datetime.datetime.fromisoformat(timing.measured_at).timestamp()
    assert measured < busy_from, (timing.measured_at, busy_from)
    assert later.reference_timing is not None and later.reference_timing.measured_at == timing.measured_at


def test_the_sandbox_sees_an_allow_list_of_the_host(judge: Judge) -> None:
    """Class "also" of round 2: world-readable files outside the Python installation (the operator's
    other folders, this repository beside the package) are not in the sandbox's root at all."""
    import shutil

    from drkernel.sandbox.plumbing.isolation import HIDDEN, SYSTEM, needed_paths

    repo = Path(__file__).resolve().parents[2]
    outside = Path("/opt") / f"drkernel-allowlist-{uuid.uuid4().hex[:8]}"
    try:
        outside.mkdir(parents=True)
        (outside / "notes.txt").write_text("the operator's")
        (outside / "notes.txt").chmod(0o644)
        outside.chmod(0o755)
    except OSError:
        outside = repo / "docs"  # no /opt to write here: the repository's docs stand for it
    paths = [str(outside / "notes.txt"), str(repo / "README.md"), str(repo / "tests" / "__init__.py")]
    try:
        r = evaluate(judge, attack("host_listing", paths=json.dumps(paths)))
    finally:
        if outside.name.startswith("drkernel-allowlist-"):
            shutil.rmtree(outside, ignore_errors=True)
    lines = r.sandbox_output.splitlines()
    assert not [line for line in lines if line.startswith("READ")], r.sandbox_output
    assert sum(line.startswith("DENIED") for line in lines) == len(paths), r.sandbox_output
    import ast

    root = ast.literal_eval(next(line for line in lines if line.startswith("ROOT"))[5:])
    allowed = {p.strip("/").split("/")[0] for p in [*SYSTEM, *needed_paths(), *HIDDEN, "/proc"]}
    assert set(root) <= allowed | {"tmp"}, root
    assert "opt" not in root or any(p.startswith("/opt") for p in needed_paths())
