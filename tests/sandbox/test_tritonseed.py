"""The judge's Triton seed (sandbox/plumbing/tritonseed.py): built once in the background, whole or
absent, and copied into each new sandbox's private Triton cache as the sandbox's own. (On the GPU:
test_gpu.py holds that a seeded cache is what Triton's first launch looks for.)"""

from __future__ import annotations

import os
import stat

import pytest

from drkernel.sandbox.plumbing.process import SandboxProcess, Zygote
from drkernel.sandbox.plumbing.tritonseed import TritonSeed, copy_seed

# A stand-in for Triton's build: a module file under a key folder of TRITON_CACHE_DIR.
FAKE_BUILD = ("import os; d = os.path.join(os.environ['TRITON_CACHE_DIR'], 'k3y'); os.makedirs(d); "
              "open(os.path.join(d, 'cuda_utils.cpython-x.so'), 'wb').write(b'ELF')")


def test_a_seed_is_built_once_in_the_background_and_found_by_the_next_judge(tmp_path):
    seed = TritonSeed(tmp_path / "seeds", {"PATH": os.environ["PATH"]}, code=FAKE_BUILD)
    path = seed.wait(60)
    assert path is not None, seed.error
    assert (tmp_path / "seeds").stat().st_mode & 0o077 == 0  # no other user can read or plant a build
    assert open(os.path.join(path, "k3y", "cuda_utils.cpython-x.so"), "rb").read() == b"ELF"
    assert [p.name for p in (tmp_path / "seeds").iterdir()] == [os.path.basename(path)]  # no build left over
    seed.close()
    again = TritonSeed(tmp_path / "seeds", {"PATH": os.environ["PATH"]}, code="raise SystemExit(1)")
    assert again.ready() == path and again._thread is None  # kept: nothing to build
    again.close()
    assert os.path.isdir(path)


def test_a_failed_build_leaves_no_seed_and_says_why(tmp_path):
    seed = TritonSeed(tmp_path / "seeds", {"PATH": os.environ["PATH"]},
                      code="import sys; sys.stderr.write('no C compiler here'); sys.exit(3)")
    assert seed.wait(60) is None
    assert seed.error is not None and "no C compiler here" in seed.error and "3" in seed.error
    assert list((tmp_path / "seeds").iterdir()) == []


def test_a_build_that_makes_no_module_is_no_seed(tmp_path):
    seed = TritonSeed(tmp_path / "seeds", {"PATH": os.environ["PATH"]}, code="pass")
    assert seed.wait(60) is None and seed.error is not None


def test_a_judges_own_seed_goes_with_it(tmp_path):
    seed = TritonSeed(tmp_path / "mine", {"PATH": os.environ["PATH"]}, code=FAKE_BUILD, persistent=False)
    assert seed.wait(60) is not None
    seed.close()
    assert not (tmp_path / "mine").exists()


def test_two_judges_building_at_once_end_with_one_whole_seed(tmp_path):
    env = {"PATH": os.environ["PATH"]}
    a, b = (TritonSeed(tmp_path / "seeds", env, code=FAKE_BUILD) for _ in range(2))
    assert a.wait(60) == b.wait(60) is not None
    assert len(list((tmp_path / "seeds").iterdir())) == 1
    a.close()
    b.close()


def test_the_copy_is_the_sandboxes_own(tmp_path):
    seed = TritonSeed(tmp_path / "seeds", {"PATH": os.environ["PATH"]}, code=FAKE_BUILD)
    src = seed.wait(60)
    assert src is not None
    cache = tmp_path / "box" / "triton"
    uid = 123_458 if os.geteuid() == 0 else None
    assert copy_seed(src, str(cache), uid)
    copied = cache / "k3y" / "cuda_utils.cpython-x.so"
    copied.write_bytes(b"planted")  # a candidate rewrites its copy ...
    assert open(os.path.join(src, "k3y", "cuda_utils.cpython-x.so"), "rb").read() == b"ELF"  # ... only
    if uid is not None:
        assert {os.stat(p).st_uid for p in (cache, cache / "k3y", copied)} == {uid}
    seed.close()


def test_no_seed_copies_nothing_and_a_failed_copy_leaves_nothing(tmp_path):
    assert not copy_seed(None, str(tmp_path / "a"), None)
    assert not (tmp_path / "a").exists()
    (tmp_path / "b").mkdir()  # the destination is taken: the copy fails, the sandbox builds for itself
    assert not copy_seed(str(tmp_path), str(tmp_path / "b"), None)


@pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox of its own uid needs root")
def test_a_new_sandbox_starts_with_its_copy_of_the_seed(tmp_path):
    seed = TritonSeed(tmp_path / "seeds", {"PATH": os.environ["PATH"]}, code=FAKE_BUILD)
    assert seed.wait(60) is not None
    zygote = Zygote("cpu")
    proc = SandboxProcess("candidate", "cpu", zygote=zygote, isolate_uid=True, triton_seed=seed.ready())
    try:
        assert proc.seeded
        copied = os.path.join(proc.workdir, "triton", "k3y", "cuda_utils.cpython-x.so")
        info = os.stat(copied)
        assert info.st_uid == proc.uid and stat.S_ISREG(info.st_mode)
    finally:
        proc.kill()
        zygote.close()
        seed.close()


def test_a_folder_others_may_write_holds_no_seed(tmp_path):
    """Another user could plant a build there for every sandbox to load: the judge builds none."""
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    seed = TritonSeed(folder, {"PATH": os.environ["PATH"]}, code=FAKE_BUILD)
    assert seed.ready() is None and seed.wait(5) is None
    assert seed.error is not None and "not this user's alone" in seed.error
    assert list(folder.iterdir()) == []
