"""`drkernel serve`: the judge as a service on 127.0.0.1, with an embedded store; Ray on request.

Input: flags (over DRKERNEL_* variables, read by settings.py); output: a running server until
interrupted (exit code 0), or exit code 2 with a one-line message for a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from drkernel.errors import ConfigError

if TYPE_CHECKING:
    import uvicorn

__all__ = ["register", "run"]

logger = logging.getLogger(__name__)

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "serve", help="serve the judge over HTTP (KernelGYM-compatible API)",
        description="Serve the judge over HTTP. Defaults bind 127.0.0.1.",
        epilog="Authentication: set DRKERNEL_AUTH_TOKEN in the environment to require "
               "'Authorization: Bearer <token>' on every route but /health "
               "(drkernel's clients read the token from "
               "the variable that --server-token-env names). "
               "Without it anyone who can reach the port can submit code: serve beyond "
               "127.0.0.1 only with a token. Most flags can also be set by a DRKERNEL_* variable; "
               "docs/service.md lists which.",
    )
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8000)")
    p.add_argument("--db", dest="db_path", default=None,
                   help="SQLite file of tasks and results (default drkernel-serve.db)")
    p.add_argument("--executor", choices=["local", "ray"], default=None,
                   help="local worker pool (default) or a Ray cluster")
    p.add_argument("--address", dest="ray_address", default=None,
                   help="Ray cluster address (with --executor ray; default: a private local one)")
    p.add_argument("--workers", dest="num_workers", type=int, default=None,
                   help="worker count (default: one per GPU, or cores/2 on the CPU)")
    p.add_argument("--judges-per-gpu", dest="judges_per_gpu", type=int, default=None,
                   help="judges sharing each GPU (local executor, default 4): their compiles and correctness "
                        "trials overlap, their timing and profiling windows take turns")
    p.add_argument("--isolation", choices=["process", "thread"], default=None,
                   help="local executor: each judge in its own process (default) or a thread")
    p.add_argument("--judge", choices=["sandbox", "fake"], default=None,
                   help="'fake' answers from '# fake:' markers, for demos and client tests")
    p.add_argument("--max-queue", dest="max_queue", type=int, default=None,
                   help="tasks waiting beyond this are refused with 429 and Retry-After (default 10000)")
    p.add_argument("--retention", dest="retention_s", type=float, default=None,
                   help="seconds finished tasks are kept (default 7 days)")
    p.add_argument("--evaluate-wait", dest="evaluate_wait_s", type=float, default=None,
                   help="bound the wait of POST /evaluate (default: block until the result, as "
                        "KernelGYM); past it the answer is 200 with status pending/processing")
    p.add_argument("--devices", default=None,
                   help="local executor: comma list of GPUs to use, e.g. cuda:0,cuda:2")
    p.add_argument("--heartbeat-timeout", dest="heartbeat_timeout_s", type=float, default=None,
                   help="seconds without a heartbeat after which a judge is frozen (default 15)")
    p.add_argument("--deadline-grace", dest="deadline_grace_s", type=float, default=None,
                   help="watchdog: a judge silent past 3 x timeout + this is stuck (default 60)")
    p.add_argument("--dedupe-window", dest="dedupe_window_s", type=float, default=None,
                   help="seconds within which an identical request without task_id from the "
                        "same client is answered by the first task (default 60; 0: off)")
    p.add_argument("--timing-cache", dest="timing_cache", default=None,
                   help="reference-timing cache file the judges share: the device's peaks and each "
                        "problem's reference times, measured once (default: the user's, as drkernel "
                        "eval's, ~/.cache/drkernel/reference_timings.sqlite); none: each judge its own, "
                        "in memory")
    p.add_argument("--durable", action="store_true", default=None,
                   help="fsync every commit (survives power loss, slower)")
    p.add_argument("--insecure", action="store_true",
                   help="run candidates without sandbox isolation (trusted code only; every result then "
                        "says \"isolation\": \"none\"); without it each judge refuses to start where it "
                        "cannot isolate sandboxes (as DRKERNEL_INSECURE=1)")
    p.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="uvicorn log level (default info)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from drkernel.server.app import begin_shutdown, create_app
    from drkernel.server.settings import Settings, scrub_secrets

    names = ("host", "port", "db_path", "executor", "ray_address", "num_workers", "judges_per_gpu",
             "isolation", "judge", "max_queue", "retention_s", "evaluate_wait_s", "durable",
             "heartbeat_timeout_s", "deadline_grace_s", "dedupe_window_s", "timing_cache")
    devices = getattr(args, "devices", None)
    try:
        settings = Settings.from_env(
            **{n: getattr(args, n, None) for n in names},
            devices=tuple(d.strip() for d in devices.split(",") if d.strip()) if devices else None)
    except (ConfigError, TypeError) as exc:
        print(f"drkernel serve: {exc}", file=sys.stderr)
        return 2
    conflict = _flag_conflict(args, settings)
    if conflict:
        print(f"drkernel serve: {conflict}", file=sys.stderr)
        return 2
    if settings.executor == "ray" and settings.ray_address:
        from drkernel.errors import ExecutorError
        from drkernel.executors.ray import check_ray_address, check_ray_auth

        try:  # no cluster there, or one that wants a token we lack: one line, before long retries
            check_ray_address(settings.ray_address)
            check_ray_auth(settings.ray_address)
        except (ConfigError, ExecutorError) as exc:
            print(f"drkernel serve: {exc}", file=sys.stderr)
            return 2
    scrub_secrets()  # read once; no child process inherits the token
    if getattr(args, "insecure", False):  # the judges' config travels to them (settings.judges())
        settings = settings.replace(judge_settings=settings.judge_settings.replace(insecure=True))
    if settings.auth_token:
        print("drkernel serve: bearer-token auth is on (DRKERNEL_AUTH_TOKEN); /health stays open",
              file=sys.stderr, flush=True)
    elif settings.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("serving on %s without DRKERNEL_AUTH_TOKEN: anyone who can reach it "
                       "can submit code", settings.host)
    else:
        print("drkernel serve: auth is off (set DRKERNEL_AUTH_TOKEN to require a bearer token)",
              file=sys.stderr, flush=True)
    db = os.path.abspath(settings.db_path)
    print(f"drkernel serve: task store {db}{'' if os.path.exists(db) else ' (new)'}", file=sys.stderr,
          flush=True)
    try:  # what can be checked before the judges start (seconds, or minutes on a GPU host)
        _check_listen(settings.host, settings.port)
        _check_store(settings.db_path)
        if settings.judge == "sandbox":
            _check_timing_cache(settings.judges().cache_path)
    except ConfigError as exc:
        print(f"drkernel serve: {exc}", file=sys.stderr)
        return 2
    from drkernel.errors import DrKernelError
    from drkernel.server.app import default_executor

    # the executor is built here, not in the app's startup, where a failure (no Ray cluster, no judge that
    # starts) was uvicorn's traceback: here it is one line and exit code 2
    try:
        executor = default_executor(settings)
    except DrKernelError as exc:
        print(f"drkernel serve: {_executor_error(settings, exc)}", file=sys.stderr)
        return 2
    app = create_app(settings, lambda _: executor)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=args.log_level,
                            workers=1, timeout_graceful_shutdown=30)
    server = _server(config, lambda: begin_shutdown(app))
    try:
        with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run
            server.run()
    finally:
        executor.close()  # idempotent: the app's shutdown closed it, unless uvicorn never started it
    return 0 if server.started else 3  # 3: uvicorn's exit code for a server that never started


def _server(config: uvicorn.Config, stopping: Callable[[], None]) -> uvicorn.Server:
    """uvicorn's server, telling the app first when it begins to stop: uvicorn waits for open requests
    before the app's own shutdown, and a long poll held it 30 s (then answered 500)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            stopping()
            await super().shutdown(sockets)

    return Server(config)


def _flag_conflict(args: argparse.Namespace, settings: Any) -> str | None:
    """A flag the chosen executor would ignore: `--address HOST:6379` without `--executor ray` served a
    local pool, and `--devices` or `--isolation thread` with Ray were dropped, all without a word."""
    if getattr(args, "ray_address", None) and settings.executor != "ray":
        return f"--address {args.ray_address} names a Ray cluster: add --executor ray (the local executor " \
               "would ignore it)"
    if settings.executor == "ray":
        given = [flag for flag, dest in (("--devices", "devices"), ("--isolation", "isolation"))
                 if getattr(args, dest, None) is not None]
        if given:
            return f"{' and '.join(given)}: the local executor's; with --executor ray each GPU of the " \
                   "cluster gets one judge actor"
    return None


def _check_listen(host: str, port: int) -> None:
    """Bind --host:--port once and let go: a port in use or a host that does not resolve is one line
    now, where uvicorn said it in several after every judge had started, and exited 3."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"--host {host}: not an address this machine can listen on ({exc})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise ConfigError(f"--host {host} --port {port}: cannot listen there: "
                              f"{exc.strerror or exc}") from None


def _check_timing_cache(path: str | None) -> None:
    """Open the judges' shared reference-timing cache once: a file that cannot be made (a home that is
    read-only, a folder in the way) is one line naming the flag, before any judge starts."""
    from drkernel.sandbox.refcache import ReferenceTimingCache

    if path is None:
        return
    try:
        ReferenceTimingCache(path).close()
    except ConfigError as exc:
        raise ConfigError(f"{exc} (give another file with --timing-cache, or none)") from None


def _check_store(db_path: str) -> None:
    """Open the task store once and read what the start reads (the tasks to run again, the counts):
    a --db that SQLite cannot open, that is not a database or that is damaged is one line, where it
    was a traceback in the app's startup."""
    import sqlite3

    from drkernel.server.store import TaskStore

    if db_path == ":memory:":
        return
    try:
        store = TaskStore(db_path, exclusive=True)  # another server on it: one line now
    except (sqlite3.Error, OSError) as exc:
        raise ConfigError(f"--db {db_path}: cannot open it as the task store: {exc}") from None
    try:
        store.queued()
        store.counts()
    except sqlite3.Error as exc:
        raise ConfigError(f"--db {db_path}: cannot read the task store: {exc} (move the file aside to "
                          "start with an empty store; `sqlite3 FILE .recover` may save its tasks)") from None
    finally:
        store.close()


def _executor_error(settings: Any, exc: Exception) -> str:
    """Why the judges could not be started, in one line, with what to do for a missing Ray cluster."""
    from drkernel.executors.ray import RAY_START_HELP

    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if settings.executor == "ray" and "Could not find any running Ray instance" in first:
        where = settings.ray_address or "auto"
        return f"--executor ray --address {where}: no Ray cluster runs here: {RAY_START_HELP}"
    return first
