"""Judge-side handle of one sandbox process: spawn warm, request with deadlines, watch, kill.

A dead process is noticed within one poll interval (50 ms), not at the timeout; host memory is
polled and the process killed past its limit. Never raises for what the candidate does: callers get
SandboxFailure with a kind ("crash", "timeout", "memory_limit", "protocol").
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pwd
import secrets
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from drkernel.sandbox.plumbing import isolation
from drkernel.sandbox.plumbing.tritonseed import copy_seed
from drkernel.sandbox.wire.helpermsg import ForkAnswer, ForkRequest, IsolationSpec, WorkerArgs
from drkernel.sandbox.wire.protocol import Hello, ProtocolError, read_message, write_message

log = logging.getLogger(__name__)

__all__ = ["SandboxFailure", "SandboxFolder", "SandboxProcess", "UidLease", "Zygote", "remove_tree",
           "sandbox_env", "scratch_root", "sweep_stale_folders", "sweep_uid"]

_POLL_S = 0.05
# a fork server that has answered once forks in milliseconds; one silent this long is frozen
SPAWN_TIMEOUT_S = 20.0
# the folder that holds the drkernel package (what a sandbox's PYTHONPATH names)
_PACKAGE_PARENT = str(Path(isolation.package_folder()).resolve().parent)


def scratch_root(device: str) -> str | None:
    """Where sandboxes keep their folders: tmpfs (/dev/shm) on a GPU judge when it has room.

    Outputs of KernelBench-sized problems are files of a GiB each way, written and read several
    times per evaluation; tmpfs keeps them in memory. A judge's config may name another folder
    (JudgeSettings.scratch_dir, DRKERNEL_SCRATCH_DIR).
    """
    if not device.startswith("cuda"):
        return None
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    return "/dev/shm" if free >= 16 << 30 and os.access("/dev/shm", os.W_OK | os.X_OK) else None


def remove_tree(path: str) -> bool:
    """Remove a sandbox folder; retried, since the fork server may still write a dead child's status.

    Never raises: a folder that stays is logged by the caller's caller, not fatal to a verdict.
    """
    for attempt in range(20):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return True
        time.sleep(0.005 * (attempt + 1))
    return False


def _discard(workdir: str, lease: UidLease | None, folder: SandboxFolder | None = None,
             mounted: bool = False) -> bool:
    """Remove a sandbox's folder (its own filesystem unmounted first, where it has one), then give its
    uid back. Returns whether the folder is gone.

    shutil.rmtree removes a link the sandbox planted in its folder, never what it points to."""
    if folder is not None:
        folder.close()
    if mounted:
        _unmount_folder(workdir)
    removed = remove_tree(workdir)
    if lease is not None:
        lease.release()
    return removed


_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2
_FOLDER_PREFIXES = ("drkernel-candidate-", "drkernel-reference-")


def _mount_folder(path: str, size_mb: int, uid: int | None) -> bool:
    """Mount a tmpfs of `size_mb` on `path`, owned by `uid`, mode 0700. False where the judge cannot
    mount (not root, no mount rights): the folder stays on the scratch's filesystem."""
    import ctypes

    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV),
                    f"size={int(size_mb)}m,mode=0700{owner}".encode())
    if rc != 0:
        log.warning("no filesystem of its own for a sandbox (%s): its disk is bounded per file only",
                    os.strerror(ctypes.get_errno()))
    return rc == 0


def _unmount_folder(path: str) -> None:
    import ctypes

    with contextlib.suppress(OSError):
        ctypes.CDLL(None, use_errno=True).umount2(path.encode(), _MNT_DETACH)


def sweep_stale_folders(root: str | None) -> int:
    """Unmount and remove the filesystems of sandboxes whose judge died without removing them (their
    uid's lease is free again): after a crash they would hold host memory until the next reboot.
    Returns how many were removed."""
    root = os.path.abspath(root or tempfile.gettempdir())
    removed = 0
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return 0
    for fields in mounts:
        point = fields[4] if len(fields) > 4 else ""
        name = os.path.basename(point)
        if os.path.dirname(point) != root or not name.startswith(_FOLDER_PREFIXES):
            continue
        options = fields[-1].split(",")
        uid = next((int(o[4:]) for o in options if o.startswith("uid=") and o[4:].isdigit()), None)
        if uid is None or not UidLease.free(uid):
            continue
        _unmount_folder(point)
        if remove_tree(point):
            removed += 1
    return removed


def sweep_uid(uid: int) -> None:
    """SIGKILL every process running as `uid` (a sandbox's own uid): nothing it forked survives."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    cmd = [kill, "-9", "-1"] if kill else [sys.executable, "-c", "import os; os.kill(-1, 9)"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):  # kill(-1) spares the caller itself
        subprocess.run(cmd, user=uid, group=uid, extra_groups=[], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5, check=False)


_UID_DIR = "/tmp/drkernel-uids"


class UidLease:
    """A random uid that no account has and no other live sandbox on this host holds.

    The lease is an flock on a per-uid file, so it ends with its holder, even one that crashed;
    whatever such a holder left running under the uid is swept when the uid is leased again.
    """

    def __init__(self) -> None:
        os.makedirs(_UID_DIR, mode=0o700, exist_ok=True)
        while True:
            uid = 100_000 + secrets.randbelow(900_000)
            try:
                pwd.getpwuid(uid)
                continue  # an account has it
            except KeyError:
                pass
            fd = os.open(os.path.join(_UID_DIR, str(uid)),
                         os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # another live sandbox holds it
            self.uid, self._fd = uid, fd
            sweep_uid(uid)  # leftovers of a crashed earlier holder
            return

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @staticmethod
    def free(uid: int) -> bool:
        """Whether no live holder has `uid` leased (its lease file is absent, or its flock is free)."""
        try:
            fd = os.open(os.path.join(_UID_DIR, str(uid)), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)


class SandboxFolder:
    """A folder a sandbox owns, as the judge (root) writes in it: through a handle opened when the judge
    made it, name by name, never following a link the sandbox put there. The sandbox cannot move the
    folder itself (its mount view binds it in place), but it owns every name inside."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1  # its number may name another file from here on

    def write_file(self, name: str, data: bytes) -> str:
        """Put `data` under `name`, whatever the sandbox left there under that name: a new file
        (created with O_EXCL | O_NOFOLLOW beside it) is renamed over it, so a link the sandbox planted
        is replaced, never written through. Returns the path. Raises SandboxFailure("protocol") where
        the name cannot be replaced (the sandbox put a folder there): the candidate's failure."""
        _plain_name(name)
        if self._fd < 0:
            raise ValueError(f"the folder {self.path} was closed")
        for _ in range(8):
            spare = f".{name}.{secrets.token_hex(8)}"
            try:
                fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o644, dir_fd=self._fd)
            except FileExistsError:  # the sandbox made that name first: draw another
                continue
            try:
                with open(fd, "wb") as f:
                    f.write(data)
                os.rename(spare, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
                return os.path.join(self.path, name)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(spare, dir_fd=self._fd)
                raise SandboxFailure("protocol", f"the sandbox's folder holds {name!r} in a form the judge "
                                     f"cannot replace ({exc.strerror})") from None
        raise SandboxFailure("protocol", f"could not write {name!r} in the sandbox's folder")

    def remove_file(self, name: str) -> None:
        """Remove `name` if it is there: the name itself (a link, not what it names); a folder of that
        name stays until the whole folder goes."""
        _plain_name(name)
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self._fd)


def _plain_name(name: str) -> None:
    """A name directly in a folder: no separator, not "." or ".." (the judge chooses every such name)."""
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")


class SandboxFailure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def sandbox_env(device: str, triton_cache: str, home: str) -> dict[str, str]:
    """The whole environment a sandbox sees: no secrets, no proxies, nothing of the server's."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONPATH": _PACKAGE_PARENT,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "TRITON_CACHE_DIR": triton_cache,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "USER": "drkernel-sandbox",
        "LOGNAME": "drkernel-sandbox",
    }
    if device.startswith("cuda"):
        index = int(device.split(":", 1)[1]) if ":" in device else 0
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        # cuda:N means the N-th GPU this process sees; pass the sandbox that same physical GPU
        env["CUDA_VISIBLE_DEVICES"] = visible[index].strip() if index < len(visible) else str(index)
        for key in ("CUDA_HOME", "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"):
            if key in os.environ:
                env[key] = os.environ[key]
    else:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class ComparisonProcess:
    """The judge's comparison child on a GPU (drkernel.sandbox.comparator's `_serve`), started without
    importing torch here: `drkernel eval` starts it beside the fork server, before its own imports, so
    that the child's import of torch is off the path of a single evaluation. ProcessComparator owns it."""

    def __init__(self, device: str) -> None:
        self.device = device
        cmd_r, cmd_w = os.pipe()
        resp_r, resp_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_PARENT, env.get("PYTHONPATH")]))
        try:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                [sys.executable, "-m", "drkernel.sandbox.comparator", str(cmd_r), str(resp_w), device],
                pass_fds=(cmd_r, resp_w), env=env, stdin=subprocess.DEVNULL, start_new_session=False,
            )
        except BaseException:
            for fd in (cmd_w, resp_r):
                os.close(fd)
            raise
        finally:
            os.close(cmd_r)
            os.close(resp_w)
        self.w, self.r = cmd_w, resp_r

    def signal_kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()

    def close(self) -> None:
        self.signal_kill()
        with contextlib.suppress(subprocess.SubprocessError):
            self.proc.wait(timeout=10)
        for fd in (self.w, self.r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.w = self.r = -1


class Zygote:
    """Judge-side handle of a fork server (drkernel.sandbox.plumbing.zygote) for one device."""

    def __init__(self, device: str) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="drkernel-zygote-")
        self._answered = False  # once it has forged one sandbox, a fork is all it does
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = sandbox_env(device, os.path.join(self._tmp.name, "triton"), self._tmp.name)
        self._visible = env["CUDA_VISIBLE_DEVICES"]
        with open(os.path.join(self._tmp.name, "zygote.log"), "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "drkernel.sandbox.plumbing.zygote", str(theirs.fileno()),
                 str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),),
                cwd=self._tmp.name, start_new_session=True, env=env,
            )
        theirs.close()

    def alive(self) -> bool:
        """Running and able to answer: a fork server stopped (SIGSTOP, a debugger) or a zombie is
        not, and the judge starts another instead of waiting on it."""
        if self.proc.poll() is not None:
            return False
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True  # no /proc to read: the exit status is all there is
        return state not in (b"T", b"t", b"Z", b"X")

    def serves(self, device: str) -> bool:
        """Whether its sandboxes see the GPU (or none) that `device` names."""
        return self.alive() and self._visible == sandbox_env(device, "", "")["CUDA_VISIBLE_DEVICES"]

    def spawn(self, request: ForkRequest, fds: list[int], timeout_s: float | None = None) -> int:
        """Fork one sandbox; its pid. The first answer waits for torch to import (120 s); later ones
        are a fork (SPAWN_TIMEOUT_S): a fork server that takes longer is frozen, and the judge
        starts another (Judge._spawn)."""
        if timeout_s is None:
            timeout_s = SPAWN_TIMEOUT_S if self._answered else 120.0
        self._sock.settimeout(timeout_s)
        try:
            socket.send_fds(self._sock, [json.dumps(request.to_wire()).encode()], fds)
            reply = self._sock.recv(4096)
        except (TimeoutError, OSError) as exc:
            raise SandboxFailure(
                "sandbox_start", f"the fork server did not answer: {exc}{self._why()}"
            ) from None
        if not reply:
            raise SandboxFailure("sandbox_start", f"the fork server exited{self._why()}")
        self._answered = True
        try:
            answer = ForkAnswer.from_wire(json.loads(reply))
        except (ValueError, ProtocolError) as exc:
            raise SandboxFailure("sandbox_start", f"the fork server's answer is unreadable: {exc}") from None
        if answer.pid is None:
            raise SandboxFailure("sandbox_start", answer.error or "the fork server made no sandbox")
        return answer.pid

    def _why(self, max_chars: int = 4000) -> str:
        """The fork server's exit status and the end of its log, for an error message."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        code = self.proc.poll()
        state = "still running" if code is None else f"exit status {code}"
        try:
            with open(os.path.join(self._tmp.name, "zygote.log"), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - max_chars))
                log = f.read().decode(errors="replace").strip()
        except OSError:
            log = ""
        return f" ({state}); its log ends:\n{log}" if log else f" ({state}; its log is empty)"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self._tmp.cleanup()


class _ForkedChild:
    """Popen-like view of a process forked by the zygote (not our child: no waitpid)."""

    def __init__(self, pid: int, workdir: str, init: bool = False) -> None:
        self.pid = pid
        # the init of a sandbox's namespaces reports its child's death by signal N as exit code 128 + N
        self._init = init
        self._status = os.path.join(workdir, "exit_status")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] not in ("Z", "X"):
                return None
            status = int(fields[-1])  # a zombie's wait status (/proc/PID/stat field 52)
            self.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            return self._decoded()
        except (OSError, IndexError, ValueError):
            pass
        for _ in range(100):  # already reaped: the zygote records the status as it reaps the child
            try:
                fd = os.open(self._status, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                with open(fd, "rb") as f:  # never through a link the sandbox put there
                    self.returncode = int(f.read(32).strip() or b"-9")
                return self._decoded()
            except (OSError, ValueError):
                time.sleep(0.01)
        self.returncode = -signal.SIGKILL
        return self.returncode

    def _decoded(self) -> int:
        assert self.returncode is not None
        if self._init and 128 < self.returncode < 128 + 65:
            self.returncode = 128 - self.returncode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode


class SandboxProcess:
    """One sandbox child. `role` is "candidate" (runs untrusted code) or "reference"."""

    def __init__(self, role: str, device: str, memory_limit_mb: int = 8192,
                 gpu_memory_fraction: float = 0.9, start_timeout_s: float = 120.0,
                 triton_cache: str | None = None, zygote: Zygote | None = None,
                 isolate_uid: bool = False, namespaces: bool = False,
                 hide: list[str] | None = None, triton_seed: str | None = None,
                 disk_limit_mb: int = 0, scratch: str | None = None) -> None:
        """`scratch`: the folder its own folder is made in (None: the system temp folder).
        `namespaces`: run in namespaces of its own under a leased uid (sandbox/plumbing/isolation.py;
        needs the fork server), with the folders in `hide` covered; `isolate_uid` alone: a leased uid.
        `triton_seed`: the judge's build of Triton's C helpers (sandbox/plumbing/tritonseed.py), copied
        into the sandbox's own Triton cache (not into a shared `triton_cache`). `disk_limit_mb`: the size
        of the filesystem of its own that an isolated sandbox's folder is (0: the scratch's, unbounded)."""
        if namespaces and zygote is None:
            raise ValueError("sandbox namespaces need the fork server")
        isolate_uid = isolate_uid or namespaces
        self.role = role
        self.zygote = zygote  # the fork server it came from: it dies with that one
        self.device = device
        self.memory_limit_mb = memory_limit_mb
        self.workdir = tempfile.mkdtemp(prefix=f"drkernel-{role}-", dir=scratch)
        self._lease = UidLease() if isolate_uid else None
        uid = self._lease.uid if self._lease is not None else None
        self.uid = uid
        # a filesystem of its own, of `disk_limit_mb` (where the judge may mount: root, isolated): a
        # sandbox that fills it fills nothing of the reference's or another judge's
        self.bounded = namespaces and disk_limit_mb > 0 and _mount_folder(self.workdir, disk_limit_mb, uid)
        # the sandbox owns its folder: the judge's later writes and removals in it go through this
        self.folder = SandboxFolder(self.workdir)
        # safety net if kill() is never called: the folder goes and the uid is given back
        self._cleanup = weakref.finalize(self, _discard, self.workdir, self._lease, self.folder, self.bounded)
        os.chmod(self.workdir, 0o700)
        home = os.path.join(self.workdir, "home")
        os.mkdir(home)
        self.output_path = os.path.join(self.workdir, "output.log")
        if uid is not None:  # the sandbox's own uid owns its folder, nothing else
            for path in (self.workdir, home):
                os.chown(path, uid, uid)
        cmd_r, self._cmd_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        # beside the pipes, a socket for file descriptors only (the sealed span's shared memory): the
        # judge sends on it; it reads from a sandbox only the reference's (stages/sealed.py)
        self.side, side_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.side.setblocking(False)
        side_r = side_theirs.detach()
        parent = zygote.proc.pid if zygote is not None else os.getpid()
        worker_args = WorkerArgs(role=role, device=device, workdir=self.workdir,
                                 memory_mb=int(memory_limit_mb), fraction=float(gpu_memory_fraction),
                                 parent=parent)
        env = sandbox_env(device, triton_cache or os.path.join(self.workdir, "triton"), home)
        self.seeded = triton_cache is None and copy_seed(triton_seed, env["TRITON_CACHE_DIR"], uid)
        self.proc: subprocess.Popen[bytes] | _ForkedChild
        self._rss_of_children = False
        if zygote is not None:
            spec = None
            if namespaces:
                assert uid is not None  # namespaces lease a uid
                keep = [self.workdir] + ([triton_cache] if triton_cache else [])
                spec = IsolationSpec(uid=uid, keep=keep, hide=list(hide or []),
                                     expose=list(isolation.needed_paths()))
            request = ForkRequest(args=worker_args, env=env, cwd=home, workdir=self.workdir,
                                  output_path=self.output_path, uid=uid, isolation=spec)
            try:
                pid = zygote.spawn(request, [cmd_r, resp_w, side_r])
            except BaseException:
                for fd in (cmd_r, resp_w, side_r, self._cmd_w, self._resp_r):
                    os.close(fd)
                self.side.close()
                self._cleanup()
                raise
            self.proc = _ForkedChild(pid, self.workdir, init=namespaces)
            self._rss_of_children = namespaces  # the sandbox's processes are its init's descendants
        else:
            args = [sys.executable, "-m", "drkernel.sandbox.inside.worker", str(cmd_r), str(resp_w),
                    *worker_args.argv(), str(side_r)]
            with open(self.output_path, "wb") as out:
                self.proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    pass_fds=(cmd_r, resp_w, side_r), cwd=home, start_new_session=True, env=env,
                    user=uid, group=uid, extra_groups=[] if uid is not None else None,
                )
        os.close(cmd_r)
        os.close(resp_w)
        os.close(side_r)
        self.started_at = time.monotonic()
        self.info: Hello | None = None
        self._start_timeout_s = start_timeout_s
        self.used = False
        self._seq = 0  # random tag of the last op sent; every reply must echo it

    # -- lifecycle ----------------------------------------------------------------------------
    def wait_ready(self) -> Hello:
        if self.info is None:
            reply = self.receive(self.started_at + self._start_timeout_s)
            if reply.get("ok") is not True:
                err = reply.get("error")
                message = err.get("message") if isinstance(err, dict) else None
                raise SandboxFailure("sandbox_start", str(message or "sandbox failed to start"))
            try:
                self.info = Hello.from_wire(reply)
            except ProtocolError as exc:
                self.kill()
                raise SandboxFailure("protocol", f"sandbox sent a malformed greeting: {exc}") from None
        return self.info

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal_kill(self) -> None:
        """SIGKILL the sandbox's process group and return at once (kill() then waits and cleans up)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def stop(self) -> None:
        """Kill every process of the sandbox and wait for them; its folder and files stay (kill())."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        else:  # the leader is gone; its group may not be
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self.uid is not None:  # processes that left the group (setsid) still run as this uid
            sweep_uid(self.uid)

    def kill(self) -> None:
        self.stop()
        for fd in (self._cmd_w, self._resp_r):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        # a second kill() must not close these numbers again: by then they may be another sandbox's
        self._cmd_w = self._resp_r = -1
        self.side.close()  # a socket object: closing twice is harmless
        if self._cleanup() is False:  # the finalizer's one run (None once it has run)
            log.warning("could not remove the sandbox folder %s", self.workdir)

    def output_tail(self, limit: int = 4000) -> str:
        try:  # the sandbox owns its folder: never follow a link it put in place of its log
            fd = os.open(self.output_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with open(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return ""
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def write_file(self, name: str, data: bytes) -> str:
        """`SandboxFolder.write_file` in this sandbox's folder; SandboxFailure once it was killed."""
        if self.folder.closed:
            raise SandboxFailure("crash", "the sandbox was already killed")
        return self.folder.write_file(name, data)

    def remove_file(self, name: str) -> None:
        self.folder.remove_file(name)

    # -- requests -----------------------------------------------------------------------------
    def request(self, message: dict[str, Any], deadline: float) -> dict[str, Any]:
        """Send one op and wait for its reply until `deadline` (time.monotonic())."""
        self.send(message)
        return self.receive(deadline)

    def send(self, message: dict[str, Any]) -> None:
        self.used = True
        self._seq = secrets.randbits(63)  # unguessable: a forged reply cannot echo it
        try:
            write_message(self._cmd_w, message | {"seq": self._seq})
        except (BrokenPipeError, OSError):
            raise self._death() from None

    def send_fd(self, fd: int) -> None:
        """Pass a file descriptor to the sandbox (on its side socket), before the op that takes it."""
        try:
            socket.send_fds(self.side, [b"fd"], [fd])
        except OSError:
            raise self._death() from None

    def receive_fd(self, deadline: float) -> int:
        """One file descriptor the sandbox sent on its side socket (the reference's only: the judge
        never takes one from a candidate). Anything else there (no descriptor, several) is a
        SandboxFailure("protocol"); descriptors beyond the first are closed."""
        while True:
            try:
                _, fds, flags, _ = socket.recv_fds(self.side, 16, 4)
                break
            except BlockingIOError:
                if time.monotonic() > deadline or not self.alive():
                    raise SandboxFailure("protocol", "the sandbox sent no file descriptor") from None
                select.select([self.side], [], [], _POLL_S)
            except OSError:
                raise self._death() from None
        for extra in fds[1:]:
            os.close(extra)
        if len(fds) != 1 or flags & socket.MSG_CTRUNC:
            for fd in fds[:1]:
                os.close(fd)
            raise SandboxFailure("protocol", f"the sandbox sent {len(fds)} file descriptors, not one")
        return fds[0]

    def receive(self, deadline: float) -> dict[str, Any]:
        if self._resp_r < 0:  # killed: nothing more will come
            raise self._death()
        while True:
            remaining = deadline - time.monotonic()
            # look at the pipe even past the deadline: a spare that sat ready in the pool for longer
            # than its start timeout has its reply waiting there
            ready, _, _ = select.select([self._resp_r], [], [], max(0.0, min(_POLL_S, remaining)))
            if not ready and remaining <= 0:
                self.kill()
                raise SandboxFailure("timeout", "the evaluation ran past its time limit")
            if ready:
                try:
                    reply = read_message(self._resp_r)
                except EOFError:
                    raise self._death() from None
                except ProtocolError as exc:
                    self.kill()
                    raise SandboxFailure("protocol", f"sandbox sent a malformed reply: {exc}") from None
                if reply.get("seq", 0) != self._seq:
                    self.kill()
                    raise SandboxFailure(
                        "protocol", f"reply out of sequence: {reply.get('seq')!r}, expected {self._seq}"
                    )
                return reply
            if self.proc.poll() is not None:
                raise self._death()
            rss = _tree_rss_mb(self.proc.pid) if self._rss_of_children else _rss_mb(self.proc.pid)
            if rss is not None and rss > self.memory_limit_mb:
                self.kill()
                raise SandboxFailure(
                    "memory_limit", f"host memory {rss} MB exceeded the {self.memory_limit_mb} MB limit"
                )

    def _death(self) -> SandboxFailure:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        code = self.proc.returncode
        if code is not None and code < 0:
            how = f"killed by signal {signal.Signals(-code).name}"
        else:
            how = f"exited with code {code}"
        tail = self.output_tail(1500).strip()
        if "MemoryError" in tail or "Cannot allocate memory" in tail:
            return SandboxFailure("memory_limit", f"the sandbox ran out of host memory and {how}")
        return SandboxFailure(
            "crash", f"the sandbox process {how}" + (f"; last output:\n{tail}" if tail else "")
        )


def _tree_rss_mb(root: int) -> int | None:
    """Resident memory of every descendant of `root` (the sandbox's init, not counted: it is a copy
    of the fork server that shares its pages); None if none could be read."""
    total, seen, todo = 0, False, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except (OSError, ValueError):
            kids = []
        for kid in kids:
            rss = _rss_mb(kid)
            if rss is not None:
                total, seen = total + rss, True
            todo.append(kid)
    return total if seen else None


def _rss_mb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        return None
    return None
