"""Triton's C helpers, built once by the judge and copied into each new sandbox's private Triton cache.

Every sandbox compiles into a Triton cache of its own, so no candidate can plant a binary for the next.
On a GPU a process's first Triton launch then also builds Triton's driver utilities (`cuda_utils`, a C
extension) with the host's C compiler, in every candidate's first call (bench/triton_cold.py times it).
The judge builds that module once, in a process of its own that runs only Triton's code, into a
folder no sandbox can see (the reference-timing cache's, else the judge's scratch root); each sandbox
then starts with its own copy, which Triton finds by the hash of its source. A candidate can change
or delete only its copy. Where the build fails or has not finished, sandboxes build the module
themselves, as before: the seed only saves time, it never decides a verdict.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

__all__ = ["BUILD_CODE", "TritonSeed", "copy_seed"]

log = logging.getLogger(__name__)

# What the builder runs: Triton's own driver builds and loads `cuda_utils` into TRITON_CACHE_DIR. It
# creates no CUDA context (the module is compiled and loaded; no device call is made).
BUILD_CODE = "from triton.backends.nvidia.driver import CudaUtils\nCudaUtils()\n"
_BUILD_TIMEOUT_S = 300.0


def _tag() -> str:
    """One seed per Triton version, Python version and machine: a build of one never serves another."""
    try:
        from importlib.metadata import version

        triton_version = version("triton")
    except Exception:  # noqa: BLE001 - no metadata: a tag that no other install shares
        triton_version = "unknown"
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return f"triton-{triton_version}-{py}-{platform.machine()}".replace(os.sep, "_")


class TritonSeed:
    """The judge's `cuda_utils` build for one host, made in the background if it is not there yet.

    `folder`: where seeds live (hidden from every sandbox); `env`: the environment a sandbox gets, so
    that Triton computes the same cache key in the builder as in the sandbox; `code`: what the builder
    runs (BUILD_CODE; tests pass another). `persistent`: keep the folder at close (a judge's cache
    folder); otherwise it is the judge's own and goes with it.
    """

    def __init__(self, folder: str | Path, env: dict[str, str], *, persistent: bool = True,
                 code: str = BUILD_CODE) -> None:
        self.folder = Path(folder)
        self.path = self.folder / _tag()
        self.persistent = persistent
        self._env = env
        self._code = code
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # made now, before any sandbox starts, so that every sandbox's namespace covers it
        self.error: str | None = _safe_folder(self.folder)
        if self.error is not None:
            log.warning("no Triton seed: %s", self.error)
        elif not self.path.is_dir():
            self._thread = threading.Thread(target=self._build, name="drkernel-triton-seed", daemon=True)
            self._thread.start()

    def ready(self) -> str | None:
        """The seed's folder once built, else None (a sandbox then builds what it needs itself)."""
        return str(self.path) if self.error is None and self.path.is_dir() else None

    def wait(self, timeout_s: float | None = None) -> str | None:
        """Block until the background build ends (or `timeout_s` passes); the seed, or None."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.ready()

    def _build(self) -> None:
        try:
            work = tempfile.mkdtemp(prefix=".build-", dir=self.folder)
        except OSError as exc:
            self.error = f"no seed folder: {exc}"
            return
        try:
            cache = os.path.join(work, "cache")
            env = dict(self._env, TRITON_CACHE_DIR=cache, HOME=work, TMPDIR=work)
            with self._lock:
                if self._closed:
                    return
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", self._code], env=env, cwd=work, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            try:
                _, err = self._proc.communicate(timeout=_BUILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.communicate()
                self.error = f"the build took over {_BUILD_TIMEOUT_S:.0f} s"
                return
            if self._proc.returncode != 0 or not _has_module(cache):
                self.error = (f"the build exited with {self._proc.returncode}: "
                              f"{err.decode(errors='replace')[-800:]}")
                log.info("no Triton seed: %s", self.error)
                return
            with contextlib.suppress(OSError):  # taken already: another judge on this host built it too
                os.rename(cache, self.path)  # atomic: a seed is whole or absent
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
        if self._thread is not None:
            self._thread.join(10)
        if not self.persistent:
            shutil.rmtree(self.folder, ignore_errors=True)


def _safe_folder(folder: Path) -> str | None:
    """Make `folder` (mode 0700) if it is not there; why it cannot hold a seed, or None. A folder that
    another user owns or may write could hold a planted build."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError as exc:
        return f"no seed folder {folder}: {exc}"
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        return (f"the seed folder {folder} is not this user's alone "
                f"(owner {info.st_uid}, mode {info.st_mode:o})")
    return None


def _has_module(cache: str) -> bool:
    return any(name.endswith(".so") for _, _, files in os.walk(cache) for name in files)


def copy_seed(seed: str | None, cache: str, uid: int | None) -> bool:
    """Give a new sandbox's Triton cache folder `cache` its own copy of `seed`, owned by the sandbox's
    `uid` where it has one. False where there is no seed or the copy failed (nothing is left half
    copied: the sandbox then builds for itself)."""
    if seed is None:
        return False
    try:
        shutil.copytree(seed, cache, symlinks=False)
        if uid is not None:
            for root, dirs, files in os.walk(cache):
                os.chown(root, uid, uid)
                for name in files:
                    os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)
        return True
    except OSError as exc:
        log.warning("could not copy the Triton seed into a sandbox: %s", exc)
        shutil.rmtree(cache, ignore_errors=True)
        return False
