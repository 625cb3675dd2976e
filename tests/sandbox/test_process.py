"""The sandbox handle's housekeeping: folders removed despite late writers, escaped processes killed."""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time

import pytest

from drkernel.sandbox.plumbing.process import (
    SandboxProcess,
    UidLease,
    Zygote,
    remove_tree,
    scratch_root,
    sweep_uid,
)


def test_remove_tree_outlasts_a_late_writer(tmp_path):
    """The fork server writes a dead child's status into its folder while the judge removes it."""
    root = tmp_path / "sandbox"
    root.mkdir()
    for i in range(200):
        (root / f"f{i}").write_bytes(b"x" * 100)
    stop = time.monotonic() + 0.05

    def writer() -> None:
        while time.monotonic() < stop:
            try:
                (root / "exit_status").write_text("-9")
            except OSError:
                pass

    t = threading.Thread(target=writer)
    t.start()
    ok = remove_tree(str(root))
    t.join()
    ok = ok or remove_tree(str(root))  # the writer may have recreated nothing: the folder is gone
    assert ok and not root.exists()


def test_remove_tree_of_a_missing_folder_is_fine(tmp_path):
    assert remove_tree(str(tmp_path / "never-made"))


def test_scratch_root_is_the_host_default_on_cpu_and_reads_no_environment(monkeypatch):
    monkeypatch.setenv("DRKERNEL_SCRATCH_DIR", "/somewhere")  # the settings' to read, not the sandbox's
    assert scratch_root("cpu") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another uid")
def test_sweep_uid_kills_a_process_that_left_the_group():
    uid = 123_457
    # a detached process of its own session, as a candidate's double fork + setsid would leave
    proc = subprocess.Popen(["sleep", "60"], user=uid, group=uid, extra_groups=[], start_new_session=True)
    try:
        time.sleep(0.2)
        assert proc.poll() is None
        sweep_uid(uid)
        assert proc.wait(timeout=5) == -9
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_spare_that_waited_past_its_start_timeout_is_still_taken():
    """A warm spare can sit in the pool longer than its start timeout; its ready reply is waiting."""
    zygote = Zygote("cpu")
    proc = SandboxProcess("candidate", "cpu", start_timeout_s=0.5, zygote=zygote)
    try:
        for _ in range(300):  # until the ready reply is in the pipe
            if select.select([proc._resp_r], [], [], 0.1)[0]:
                break
        time.sleep(0.6)  # now past started_at + start_timeout_s
        assert proc.wait_ready().ok
    finally:
        proc.kill()
        zygote.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="leases sweep a uid, which needs root")
def test_uid_leases_are_exclusive_and_end_with_their_holder():
    a, b = UidLease(), UidLease()
    try:
        assert a.uid != b.uid
        import fcntl
        import pwd

        with pytest.raises(KeyError):
            pwd.getpwuid(a.uid)
        fd = os.open(f"/tmp/drkernel-uids/{a.uid}", os.O_RDWR)
        try:  # held: a second holder is refused
            with pytest.raises(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            a.release()
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: free to take
        finally:
            os.close(fd)
    finally:
        a.release()
        b.release()


def test_a_fork_server_that_dies_says_why(tmp_path, monkeypatch):
    """Its exit status and the end of its log are in the error (issue 18: it said only 'connection reset')."""
    from drkernel.sandbox.plumbing import process

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named numpy' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(process.sys, "executable", str(fake))
    zygote = Zygote("cpu")
    zygote.proc.wait(timeout=30)  # already dead when asked (sending to it fails, not only reading)
    try:
        with pytest.raises(process.SandboxFailure) as info:
            SandboxProcess("candidate", "cpu", zygote=zygote)
    finally:
        zygote.close()
    message = str(info.value)
    assert "fork server" in message and "exit status 3" in message
    assert "No module named numpy" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="uid isolation is root's to give")
def test_the_shared_uid_warning_says_what_it_means_and_names_the_unreadable_file():
    import tempfile
    from pathlib import Path

    from drkernel.sandbox import judge

    with tempfile.TemporaryDirectory() as d:  # under the system temp folder, open to other users
        os.chmod(d, 0o755)
        readable, secret = Path(d) / "ok.py", Path(d) / "private.py"
        readable.write_text("x = 1\n")
        secret.write_text("x = 1\n")
        secret.chmod(0o600)
        first = judge._first_unreadable([str(readable), str(secret)])
        if first == str(readable):
            pytest.skip("the system temp folder is not readable by other users here")
        assert first == str(secret)
        text = judge._SHARED_UID % first
    assert "signal or trace the judge" in text and "chmod -R o+rX" in text and str(secret) in text


def test_a_sandbox_finds_the_package_wherever_the_plumbing_sits_in_it() -> None:
    """The sandbox's PYTHONPATH and its isolated root name the drkernel package's folder, found from the
    package (the plumbing once counted folders up from its own file, which a move into a subfolder
    would have broken)."""
    from pathlib import Path

    import drkernel
    from drkernel.sandbox.plumbing import isolation, process

    package = Path(drkernel.__file__).resolve().parent
    assert Path(isolation.package_folder()).resolve() == package
    assert process.sandbox_env("cpu", "/t", "/h")["PYTHONPATH"] == str(package.parent)
    assert str(package) in isolation.needed_paths()
