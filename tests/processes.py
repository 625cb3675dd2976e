"""Process checks shared by the crash and fault tests."""

from __future__ import annotations

from pathlib import Path


def running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (a killed process its parent has not reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def terminal_signals() -> None:
    """For Popen(preexec_fn=...): SIGINT as a terminal's foreground job has it. A shell's background job
    (CI started with `&`) passes SIGINT on ignored, and a Python started with SIGINT ignored installs no
    KeyboardInterrupt handler, so a Ctrl-C test would see its signal dropped."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
