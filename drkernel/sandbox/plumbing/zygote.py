"""Fork server for sandboxes: one process imports torch and triton once, then forks a child per sandbox.

The zygote never initialises CUDA, so its children can. A child costs a fork and a CUDA context
instead of a fresh interpreter importing torch (seconds). Started with the sandbox's clean
environment; the judge talks to it over a Unix socket and passes each child's pipe fds along.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import stat
import sys
import tempfile
import traceback
from typing import Any

from drkernel.sandbox.wire.helpermsg import ForkAnswer, ForkRequest

__all__ = ["STATUS_FILE", "main"]

STATUS_FILE = "exit_status"
_workdirs: dict[int, int] = {}  # child pid -> its folder, held open


def _reap(signum: int, frame: Any) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        folder = _workdirs.pop(pid, None)
        if folder is not None:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _record(folder, str(code))


def _record(folder: int, text: str) -> None:
    """Write the status into the sandbox's folder (held open since the fork): the sandbox owns that
    folder, so neither a link in place of the file nor a folder moved away may redirect a root write."""
    try:
        fd = os.open(STATUS_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o644, dir_fd=folder)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(folder)


def isolate(uid: int) -> None:
    """Drop to an unprivileged uid of its own, in a network namespace of its own when possible.

    The judge's --insecure mode with a root judge and no namespaces; the isolated mode is
    drkernel.sandbox.plumbing.isolation.enter (namespaces and a uid).
    """
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare(0x40000000)  # CLONE_NEWNET; best effort (needs CAP_SYS_ADMIN)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _close_all_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _child(req: ForkRequest, fds: list[int], sock: socket.socket) -> None:
    sock.close()
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # a fresh folder the judge just made: nothing of a sandbox's is there yet, and nothing is followed
    out = os.open(req.output_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND,
                  0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # nothing of the fork server's reaches the sandbox but its pipes and stdio
    _close_all_but({0, 1, 2, *fds})
    os.environ.update(req.env)
    # the fork server's imports cache tempfile's folder (torch's does on both builds): the fork
    # server's own, which the sandbox cannot see. Forget it, so Triton's CUDA driver and the candidate
    # make their scratch files under the sandbox's TMPDIR (docs/benchmarks.md run Z).
    tempfile.tempdir = None
    code = 0
    try:
        args = req.args
        if req.isolation is not None:
            from drkernel.sandbox.plumbing import isolation

            isolation.enter(req.isolation.to_wire())  # returns in PID 2, the child of the namespace's init
            # the worker dies with its init (and the init with the namespace)
            args = dataclasses.replace(args, parent=os.getppid())
        elif req.uid is not None:
            isolate(req.uid)
        os.chdir(req.cwd)
        from drkernel.sandbox.inside import worker

        worker.serve(fds[0], fds[1], args.role, args.device, args.workdir, args.memory_mb, args.fraction,
                     args.parent, side_fd=fds[2] if len(fds) > 2 else -1)
    except BaseException:  # noqa: BLE001 - process edge: never back into the fork server's loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os._exit(code)


def preload() -> None:
    """What every sandbox imports, imported once here and inherited through fork. (Not torch._dynamo:
    the sandbox's profiler session, profilework.profiler_session, does not import it.)"""
    import torch  # noqa: F401 - the point of the zygote: import once, fork many
    import triton  # noqa: F401

    from drkernel.sandbox.inside import worker  # noqa: F401
    from drkernel.sandbox.plumbing import isolation  # noqa: F401


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    from drkernel.sandbox.inside.worker import die_with_parent

    die_with_parent(int(sys.argv[2]))
    preload()
    from drkernel.sandbox.plumbing import isolation

    signal.signal(signal.SIGCHLD, _reap)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
        except OSError:
            return
        if not msg:
            return
        req = ForkRequest.from_wire(json.loads(msg))
        if req.isolation is not None:
            try:
                isolation.new_pid_namespace()
            except OSError as exc:  # fail closed: no namespace, no sandbox
                for fd in fds:
                    os.close(fd)
                _answer(sock, ForkAnswer(error=f"no PID namespace for the sandbox: {exc}"))
                continue
        try:  # before the sandbox runs: the folder is still the one the judge made
            folder = os.open(req.workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            _answer(sock, ForkAnswer(error=f"no sandbox folder: {exc}"))
            continue
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        pid = os.fork()
        if pid == 0:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            _child(req, fds, sock)
        _workdirs[pid] = folder
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        for fd in fds:
            os.close(fd)
        _answer(sock, ForkAnswer(pid=pid))


def _answer(sock: socket.socket, answer: ForkAnswer) -> None:
    sock.sendall(json.dumps(answer.to_wire()).encode())


if __name__ == "__main__":
    main()
