"""The judge's writes and removals in a folder a sandbox owns (SandboxFolder): nothing a sandbox puts
there under a name the judge uses (a link to a host file or folder, a folder, a hard link) makes the
judge, which runs as root, write or remove anything else (issue 32, "no link is followed")."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from drkernel.sandbox.plumbing.process import SandboxFailure, SandboxFolder


@pytest.fixture
def box(tmp_path: Path) -> Iterator[SandboxFolder]:
    (tmp_path / "box").mkdir()
    folder = SandboxFolder(str(tmp_path / "box"))
    yield folder
    folder.close()


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "host" / "victim.pth"
    path.parent.mkdir()
    path.write_text("intact")
    return path


def test_a_link_to_a_host_file_is_replaced_not_written_through(box: SandboxFolder, victim: Path) -> None:
    os.symlink(victim, os.path.join(box.path, "submission.py"))
    path = box.write_file("submission.py", b"the candidate's text")
    assert victim.read_text() == "intact"
    assert not os.path.islink(path) and Path(path).read_bytes() == b"the candidate's text"
    assert sorted(os.listdir(box.path)) == ["submission.py"]  # no spare left behind


def test_a_dangling_link_creates_nothing_where_it_points(box: SandboxFolder, victim: Path) -> None:
    target = victim.parent / "new.pth"
    os.symlink(target, os.path.join(box.path, "submission.py"))
    box.write_file("submission.py", b"import os")
    assert not target.exists()


def test_a_hard_link_to_a_host_file_is_replaced(box: SandboxFolder, victim: Path) -> None:
    os.link(victim, os.path.join(box.path, "submission.py"))
    box.write_file("submission.py", b"new")
    assert victim.read_text() == "intact" and victim.stat().st_nlink == 1


def test_a_folder_in_place_of_the_file_is_the_sandboxs_failure(box: SandboxFolder) -> None:
    os.mkdir(os.path.join(box.path, "submission.py"))
    with pytest.raises(SandboxFailure) as info:
        box.write_file("submission.py", b"x")
    assert info.value.kind == "protocol" and "cannot replace" in info.value.message
    assert os.listdir(box.path) == ["submission.py"]


def test_a_link_to_a_host_folder_is_not_entered(box: SandboxFolder, victim: Path) -> None:
    os.symlink(victim.parent, os.path.join(box.path, "sub"))
    with pytest.raises(ValueError):
        box.write_file("sub/victim.pth", b"x")
    with pytest.raises(ValueError):
        box.remove_file("sub/victim.pth")
    assert victim.read_text() == "intact"


def test_removal_takes_the_link_never_its_target(box: SandboxFolder, victim: Path) -> None:
    os.symlink(victim, os.path.join(box.path, "trial_0.pt"))
    os.symlink(victim.parent, os.path.join(box.path, "trial_1.pt"))
    os.mkdir(os.path.join(box.path, "trial_2.pt"))
    for name in ("trial_0.pt", "trial_1.pt", "trial_2.pt", "trial_3.pt"):
        box.remove_file(name)
    assert victim.read_text() == "intact"
    assert os.listdir(box.path) == ["trial_2.pt"]  # a folder stays until the whole folder goes


def test_the_folder_moved_away_and_replaced_by_a_link_is_not_followed(tmp_path: Path, victim: Path) -> None:
    """Even where a sandbox could reach its folder's name (an insecure judge's sandboxes can), the
    judge writes through the handle it opened when it made the folder."""
    (tmp_path / "box").mkdir()
    box = SandboxFolder(str(tmp_path / "box"))
    try:
        os.rename(tmp_path / "box", tmp_path / "moved")
        os.symlink(victim.parent, tmp_path / "box")
        box.write_file("victim.pth", b"x")
        assert victim.read_text() == "intact"
        assert (tmp_path / "moved" / "victim.pth").read_bytes() == b"x"
    finally:
        box.close()


def test_a_closed_folder_refuses_writes(box: SandboxFolder) -> None:
    box.close()
    with pytest.raises(ValueError, match="closed"):
        box.write_file("submission.py", b"x")
    box.remove_file("submission.py")  # nothing to do, no error


def test_a_crashed_judges_sandbox_filesystems_are_swept(tmp_path: Path) -> None:
    """Each isolated sandbox's folder is a tmpfs of its own; a judge that dies without removing them
    leaves host memory held. The next judge unmounts those whose uid's lease is free, and only those."""
    import subprocess

    from drkernel.sandbox.plumbing.process import UidLease, sweep_stale_folders

    live = UidLease()
    try:
        stale_uid = next(u for u in range(555_001, 555_100) if UidLease.free(u))
        folders = {}
        for name, uid in (("drkernel-candidate-stale", stale_uid), ("drkernel-reference-live", live.uid)):
            path = tmp_path / name
            path.mkdir()
            if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size=1m,uid={uid},gid={uid}", "tmpfs",
                               str(path)], capture_output=True).returncode != 0:
                pytest.skip("cannot mount a tmpfs here")
            (path / "out.pt").write_bytes(b"x")
            folders[name] = path
        assert sweep_stale_folders(str(tmp_path)) == 1
        assert not folders["drkernel-candidate-stale"].exists()
        assert (folders["drkernel-reference-live"] / "out.pt").exists()  # its lease is held: untouched
    finally:
        subprocess.run(["umount", "-l", str(tmp_path / "drkernel-reference-live")], capture_output=True)
        live.release()
