"""Linux namespaces for a sandbox: its own PID, mount, network, IPC and UTS namespaces, and its own uid.

Standard library only (ctypes calls unshare(2), setns(2), mount(2) and prctl(2)); needs root, as the
judge on the GPU host and in CI runs. The fork server calls `new_pid_namespace()` before each fork, so
the child is PID 1 of a fresh namespace. The child then calls `enter()`, which forks the sandbox's
own process (PID 2) and stays as the namespace's init: the sandbox sees no other process, and when it
ends, the init ends, and the kernel kills everything left in the namespace (a double fork plus
setsid included). `enter()` sets up:

- a root of its own, from an allow list: the system's folders (/usr, /etc, /dev, /sys and the links
  /bin, /lib...), the Python installation, torch, triton and this package, read-only; its own folder,
  writable; empty read-only tmpfs at /tmp, /var/tmp and /run, a small private tmpfs at /dev/shm, and
  over every folder the judge names inside those (its reference-timing cache, the scratch root).
  Nothing else of the host is there (pivot_root), and a fresh /proc shows only its own processes;
- an empty network namespace (a loopback that is down);
- the leased uid, no supplementary groups, no new privileges (setuid binaries give nothing).

The GPU device files (/dev/nvidia*) and the driver libraries stay where they are, readable.
`probe()` tries all of it once in a throwaway process: the judge refuses to start without it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import signal
import socket
import subprocess
import sys
from typing import Any

__all__ = ["IsolationError", "enter", "install_seccomp", "needed_paths", "new_pid_namespace",
           "package_folder", "probe", "seccomp_available", "seccomp_program"]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
MOUNT_ATTR_RDONLY, AT_RECURSIVE, AT_FDCWD = 1, 0x8000, -100
_SYS_MOUNT_SETATTR = 442  # the same number on x86_64 and aarch64
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1

# always hidden: where other sandboxes, the fork server and the uid leases keep their files
# (/run: sockets of the host's services, world-writable lock folders)
HIDDEN = ("/tmp", "/var/tmp", "/dev/shm", "/run")
_SHM_SIZE = "size=1g"

_libc: Any = None
_own_pid_ns: int | None = None


class IsolationError(OSError):
    """A step of the isolation failed: the sandbox must not run."""


def _c() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                                ctypes.c_char_p]
    return _libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise IsolationError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    args = [s.encode() if s is not None else None for s in (source, target, fstype)]
    _check(_c().mount(*args, flags, data.encode() if data is not None else None), f"mount {target}")


def new_pid_namespace() -> None:
    """Make the caller's next child PID 1 of a new PID namespace (the caller itself stays where it is).

    Called before every fork: a namespace is used once, so each child gets a fresh one.
    """
    global _own_pid_ns
    if _own_pid_ns is None:
        _own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    # back to our own namespace for children first: unshare() refuses while it points elsewhere
    _check(_c().setns(_own_pid_ns, CLONE_NEWPID), "setns(own PID namespace)")
    _check(_c().unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")


# The system's folders every sandbox reads (libraries, the C compiler Triton builds with, device files,
# /etc's loader cache); where one is a link (/bin -> usr/bin), the same link in the sandbox's root.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/dev", "/sys")
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
MNT_DETACH = 2
_OLD_ROOT = ".drkernel-old-root"


def enter(spec: dict[str, Any]) -> None:
    """Isolate the calling process (PID 1 of a fresh PID namespace, still root), fork, and return in
    the child (PID 2) under spec["uid"]; PID 1 stays as the namespace's init (spec["init"] False: no fork).

    The sandbox gets a root of its own, built from an allow list: the system's folders (SYSTEM), the
    folders in spec["expose"] (the Python installation, torch, triton, this package, the NVIDIA
    daemons' sockets) and spec["keep"] (its own folder, writable); everything else of the host is
    absent, not merely read-only (before, every world-readable file of the host was readable).
    spec["hide"]: folders and files inside those to cover all the same (an empty tmpfs, /dev/null).
    Raises OSError at the first step that fails.
    """
    uid = int(spec["uid"])
    keep = [os.path.abspath(p) for p in spec.get("keep", [])]
    expose = [os.path.abspath(p) for p in spec.get("expose", []) if os.path.isdir(p)]
    hide = {os.path.abspath(p) for p in (*HIDDEN, *spec.get("hide", []))}
    _check(_c().unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare(namespaces)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back to the host
    # every allowed folder held open before anything is covered (the sandbox's folder may be under /tmp)
    links = {p: os.readlink(p) for p in SYSTEM if os.path.islink(p)}
    system = [p for p in SYSTEM if p not in links and os.path.isdir(p)]
    held = {p: os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for p in [*system, *expose, *keep]}
    root = "/tmp"  # the new root is a tmpfs mounted here, in this namespace only
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=16m")
    for path, target in links.items():
        os.symlink(target, root + path)
    for path in sorted([*system, *expose], key=len):  # parents first
        _bind_at(held[path], root + path)
    for path in sorted(hide, key=len):
        inside = root + path
        if os.path.islink(inside):
            continue
        if os.path.isfile(inside):  # a file: an empty one in its place
            _mount("/dev/null", inside, None, MS_BIND)
        elif os.path.isdir(inside) or path in HIDDEN:
            os.makedirs(inside, exist_ok=True)
            data = "mode=1777," + _SHM_SIZE if path == "/dev/shm" else "mode=755,size=1m"
            _mount("tmpfs", inside, "tmpfs", MS_NOSUID | MS_NODEV, data)
    for path in sorted(expose, key=len):  # what a cover hid inside (the NVIDIA daemons' /run/nvidia-*)
        if any(path.startswith(h + os.sep) for h in hide):
            _bind_at(held[path], root + path)
    for path in keep:  # the sandbox's own folder, last: it may sit under a cover (/tmp, /dev/shm)
        _bind_at(held[path], root + path)
    for fd in held.values():
        os.close(fd)
    os.makedirs(root + "/proc", exist_ok=True)
    os.makedirs(root + "/" + _OLD_ROOT, exist_ok=True)
    _pivot_root(root)
    _read_only_tree([*keep, "/dev/shm"])
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # its own, after: writable as /proc is
    _check(_c().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    if spec.get("init", True):
        _become_init_and_fork(uid)
    _drop_to(uid)
    if spec.get("seccomp", True) and seccomp_available():
        install_seccomp()


def _bind_at(fd: int, target: str) -> None:
    """Bind the folder held open as `fd` at `target` (made if missing), with everything mounted below it."""
    os.makedirs(target, exist_ok=True)
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)


def _pivot_root(root: str) -> None:
    """Make `root` this namespace's "/" and let go of the old one (lazily: nothing of it stays reachable)."""
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise IsolationError(errno.ENOSYS, f"pivot_root: no system call number for {os.uname().machine}")
    os.chdir(root)
    _check(_c().syscall(ctypes.c_long(number), b".", _OLD_ROOT.encode()), "pivot_root")
    os.chdir("/")
    _check(_c().umount2(("/" + _OLD_ROOT).encode(), MNT_DETACH), "umount(old root)")
    os.rmdir("/" + _OLD_ROOT)


# -- seccomp ------------------------------------------------------------------------------------
# A deny list on top of the namespaces: the system calls that escapes from a container go through,
# none of which a kernel, a compiler or CUDA needs. x86_64 only (numbers differ per architecture).
AUDIT_ARCH_X86_64 = 0xC000003E
_DENIED_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320,
    "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "keyctl": 250, "add_key": 248, "request_key": 249, "acct": 163, "swapon": 167, "swapoff": 168,
    "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173, "quotactl": 179,
    "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
    "personality": 135, "lookup_dcookie": 212, "vhangup": 153,
}
_NR_CLONE, _NR_CLONE3 = 56, 435
_NS_FLAGS = 0x00020000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x02000000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_NR_SECCOMP, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW = 317, 1, 4
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_available() -> bool:
    return sys.platform == "linux" and os.uname().machine == "x86_64"


def seccomp_program() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) BPF instructions.

    Another architecture's calling convention (i386 through int 0x80, x32) ends the process: its
    numbers would name other calls. clone3 answers ENOSYS, so that the C library falls back to clone,
    whose flags a filter can read: clone with a namespace flag, and every denied call, answer EPERM.
    """
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    denied = sorted(_DENIED_X86_64.values())
    allow = 7 + len(denied)  # after: clone's flags (allow+1, +2), allow (+3), deny (+4), enosys (+5)
    deny, enosys = allow + 4, allow + 5

    def to(target: int, at: int) -> int:  # a forward jump from instruction `at` to `target`
        return target - (at + 1)

    prog = [(ld_abs, 0, 0, 4), (jeq, 1, 0, AUDIT_ARCH_X86_64), (ret, 0, 0, _RET_KILL_PROCESS),
            (ld_abs, 0, 0, 0), (jge, to(deny, 4), 0, 0x40000000), (jeq, to(enosys, 5), 0, _NR_CLONE3),
            (jeq, to(allow + 1, 6), 0, _NR_CLONE)]
    prog += [(jeq, to(deny, 7 + i), 0, nr) for i, nr in enumerate(denied)]
    prog += [(ret, 0, 0, _RET_ALLOW),
             (ld_abs, 0, 0, 16),  # args[0], its low 32 bits: clone's flags
             (jset, to(deny, allow + 2), 0, _NS_FLAGS),
             (ret, 0, 0, _RET_ALLOW),
             (ret, 0, 0, _RET_ERRNO | errno.EPERM), (ret, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    assert len(prog) == enosys + 1
    return prog


def install_seccomp(spec_allow: bool = True) -> None:
    """Load the filter into the calling process (inherited by every thread and child it makes later).
    Needs no_new_privs (set by `enter`) or root. Raises IsolationError if the kernel refuses it.

    `spec_allow`: load it with SECCOMP_FILTER_FLAG_SPEC_ALLOW, so that the filter does not also switch
    on the speculative-store-bypass and STIBP mitigations for the process. Kernels before 5.16 do that
    by default, and it slows every CPU-bound step of the sandbox (the Triton compile, the Python of
    the correctness trials); both mitigations guard a process against itself or its own sibling
    thread, not the judge, which runs in another address space (docs/errors.md, threat model).
    Kernels without the seccomp(2) call or the flag (before 4.17) get the plain prctl."""
    prog = seccomp_program()
    insns = (_SockFilter * len(prog))(*[_SockFilter(c, t, f, k) for c, t, f, k in prog])
    fprog = _SockFprog(len(prog), ctypes.cast(insns, ctypes.POINTER(_SockFilter)))
    if spec_allow:
        libc = _c()
        rc = libc.syscall(_NR_SECCOMP, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW,
                          ctypes.byref(fprog))
        if rc == 0:
            return
        if ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS):
            _check(rc, "seccomp(SET_MODE_FILTER)")
    _check(_c().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "prctl(SECCOMP)")


def _drop_to(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _become_init_and_fork(uid: int) -> None:
    """Fork the sandbox's process (PID 2); this one stays PID 1 and returns only in the child.

    PID 1 of a namespace ignores the signals its own namespace sends it, so the sandbox must not
    be it (a candidate's kill(getpid(), SIGSEGV) must still end it). PID 1 reaps orphans and exits
    when the sandbox's process does, with its status (a signal N as exit code 128 + N); its exit
    takes every other process of the namespace with it.
    """
    pid = os.fork()
    if pid == 0:
        return
    for name in os.listdir("/proc/self/fd"):  # it holds nothing of the judge's: no pipes, no stdio
        with contextlib.suppress(OSError):
            os.close(int(name))
    _drop_to(uid)
    _c().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # and the sandbox's uid cannot trace it
    _c().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with the fork server (after setuid)
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else min(code, 127))


def _read_only_tree(writable: list[str]) -> None:
    """Every mount read-only, submounts included (a world-writable folder on any of them too); then
    the `writable` mounts (the sandbox's folder, its /dev/shm) writable again. Device files stay usable.

    mount_setattr(2) (Linux 5.12) does it for the whole tree; without it, only "/" becomes read-only.
    """
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)
    rc = _c().syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), b"/",
                      ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    if rc != 0:
        if ctypes.get_errno() != errno.ENOSYS:
            _check(rc, "mount_setattr(/, read-only, recursive)")
        _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        return
    for path in writable:
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)


def package_folder() -> str:
    """The drkernel package's folder, found from the package itself (loaded before any of its modules,
    this one included, and whatever this module's depth in it): what a sandbox imports the worker from."""
    root = sys.modules[(__package__ or "drkernel").partition(".")[0]]
    return os.path.dirname(os.path.abspath(str(root.__file__)))


@functools.cache
def needed_paths() -> tuple[str, ...]:
    """Folders a sandbox must read besides the system's (SYSTEM): the Python installation, torch,
    triton, this package (its own folder, not the folder above it), the CUDA installation and library
    folders the environment names, and the NVIDIA daemons' folders under /run."""
    import torch
    import triton

    package = package_folder()
    found = [sys.prefix, sys.base_prefix, package, os.path.dirname(os.path.dirname(torch.__file__)),
             os.path.dirname(os.path.dirname(triton.__file__))]
    found += [os.environ[k] for k in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(k)]
    found += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    with contextlib.suppress(OSError):  # the NVIDIA daemons' sockets stay (the driver may ask them)
        found += [os.path.join("/run", n) for n in os.listdir("/run") if n.startswith("nvidia")]
    return tuple(sorted({os.path.realpath(p) for p in found if os.path.isabs(p) and os.path.isdir(p)}))


def _probe_child(workdir: str, hide: list[str], needed: list[str], files: list[str]) -> str | None:
    """In the probe's PID-1 child: isolate, then check what the sandbox would see. None: all good."""
    enter({"uid": 65534, "keep": [workdir], "hide": hide, "expose": needed})
    for path in files:
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as exc:
            return f"a sandbox's uid cannot read {path}: {exc.strerror}"
    if os.getppid() != 1:
        return f"not the child of PID 1 of its own namespace (parent {os.getppid()})"
    pids = sorted(p for p in os.listdir("/proc") if p.isdigit())
    if pids != ["1", str(os.getpid())]:
        return f"other processes are visible: {pids[:5]}"
    if [n for _, n in socket.if_nameindex()] != ["lo"]:
        return "a network interface other than the loopback is visible"
    if os.listdir("/tmp") and not workdir.startswith("/tmp/"):
        return "/tmp is not empty"
    allowed = {p.strip("/").split("/")[0] for p in [*SYSTEM, *needed, *HIDDEN, workdir, "/proc"]}
    extra = sorted(set(os.listdir("/")) - allowed)
    if extra:
        return f"the sandbox's root holds more than its allow list: {extra[:5]}"
    try:
        with open(os.path.join(workdir, "w"), "w") as f:
            f.write("x")
    except OSError as exc:
        return f"the sandbox cannot write its own folder: {exc}"
    for path in ("/var/tmp/w", "/w"):
        with contextlib.suppress(OSError):
            open(path, "w").close()
            return f"{path} is writable"
    return None


def _probe_main(workdir: str, spec: dict[str, list[str]]) -> int:
    new_pid_namespace()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            problem = _probe_child(workdir, spec["hide"], spec["expose"], spec["files"])
        except BaseException as exc:  # noqa: BLE001 - process edge: report, then exit
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            sys.stderr.write(problem + "\n")
            code = 1
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def probe(hide: list[str] | None = None) -> str | None:
    """Whether this machine gives sandboxes their namespaces and a uid: None if so, else why not."""
    import json
    import tempfile

    import torch
    import triton

    if sys.platform != "linux":
        return "sandbox isolation needs Linux namespaces"
    if os.geteuid() != 0:
        return "sandbox isolation needs root (to create namespaces and run sandboxes under uids of their own)"
    with tempfile.TemporaryDirectory(prefix="drkernel-probe-") as tmp:
        os.chown(tmp, 65534, 65534)
        try:
            files = [sys.executable, os.__file__, torch.__file__, triton.__file__, __file__]
            spec = json.dumps({"hide": hide or [], "expose": list(needed_paths()), "files": files})
            res = subprocess.run([sys.executable, "-m", "drkernel.sandbox.plumbing.isolation", tmp, spec],
                                 capture_output=True, text=True, timeout=30,
                                 env={"PATH": "/usr/bin:/bin",
                                      "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the isolation probe did not run: {exc}"
    if res.returncode != 0:
        return (res.stderr.strip().splitlines() or [f"the isolation probe exited with {res.returncode}"])[-1]
    return None


if __name__ == "__main__":
    import json

    sys.exit(_probe_main(sys.argv[1], json.loads(sys.argv[2])))
