"""Operations routes in KernelGYM's JSON models (/health, /metrics, /, /workers/status,
/queue/status), and ours: Prometheus text (/v1/metrics, or /metrics asked for text/plain or
OpenMetrics), the status page (/v1/status, or / asked for text/html), the worker list (/v1/workers).

Input: the live scheduler, executor and store; output: real numbers (queue depth, running,
completed and failed counts, per-worker state), where the anchor answers hard-coded zeros.
"""

from __future__ import annotations

import html
import os
import socket
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from drkernel.server.anchor import finished_status, iso, now_iso
from drkernel.server.envelope import ServerState, server_state
from drkernel.types import EvalOutcome

__all__ = [
    "capacity",
    "health_body",
    "health_status",
    "metrics_body",
    "render_metrics",
    "router",
    "stored_totals",
]

router = APIRouter()

_WORKER_STATES = ("starting", "idle", "busy", "restarting", "dead")


def _workers(state: ServerState) -> list[dict[str, Any]]:
    states = getattr(state.executor, "worker_states", None)
    return [w.to_dict() for w in states()] if callable(states) else []


def _gpu_status(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """Per CUDA device: its workers' state. The server process never initialises CUDA (the
    anchor's does, in every API process); memory figures need a device query and are left out."""
    gpus: dict[str, Any] = {}
    for w in workers:
        device = str(w["device"])
        if not device.startswith("cuda"):
            continue
        entry = gpus.setdefault(device, {"available": False, "workers": []})
        entry["workers"].append(w["worker_id"])
        entry["available"] = entry["available"] or w["state"] in ("idle", "busy")
    return gpus or {"error": "CUDA not available"}


def _memory_usage() -> dict[str, Any]:
    """Host load and memory from the OS (no extra dependency): the anchor's memory_usage keys."""
    cores = os.cpu_count() or 1
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
        available = os.sysconf("SC_AVPHYS_PAGES") * page
        load = os.getloadavg()[0]
    except (ValueError, OSError, AttributeError):  # not a Linux-like host: nothing to report
        return {}
    return {
        "cpu_percent": round(min(100.0, load / cores * 100), 1),  # 1-min load / cores
        "memory_percent": round(100.0 * (1 - available / total), 1) if total else 0.0,
        "memory_available": f"{available / 1024**3:.1f}GB",
        "memory_total": f"{total / 1024**3:.1f}GB",
    }


def capacity(state: ServerState) -> dict[str, Any]:
    """Workers configured vs. alive (idle or busy): the capacity the server really has now."""
    workers = _workers(state)
    configured = len(workers) if workers else state.scheduler.capacity
    alive = sum(1 for w in workers if w["state"] in ("idle", "busy")) if workers else configured
    return {"configured": configured, "alive": alive,
            **{s: sum(1 for w in workers if w["state"] == s) for s in _WORKER_STATES}}


def health_status(cap: dict[str, Any]) -> str:
    """healthy: every configured worker alive; starting: some, the others still coming up for the
    first time (`serve` answers once one judge is up); degraded: some, others lost; unhealthy: none
    can take a task. (`/v1/health`; the KernelGYM `/health` says `anchor_health_status`.)"""
    if cap["alive"] <= 0:
        return "unhealthy"
    if cap["alive"] >= cap["configured"]:
        return "healthy"
    return "starting" if cap["alive"] + cap.get("starting", 0) >= cap["configured"] else "degraded"


def anchor_health_status(cap: dict[str, Any]) -> str:
    """The KernelGYM `/health` status: "healthy" while at least one worker can judge. The authors'
    training and grading scripts refuse to start on anything else; lost capacity is in the other
    fields (`workers_alive`, `workers_lost`, `degraded`), and `/v1/health` says "degraded"."""
    return "healthy" if cap["alive"] > 0 else "unhealthy"


def stored_totals(state: ServerState) -> dict[str, int]:
    """Finished tasks as the store holds them (they survive a restart; purged past retention)."""
    outcomes = state.store.outcome_counts()
    failed = sum(n for o, n in outcomes.items() if _is_error(o))
    done = sum(outcomes.values())
    return {"total_processed": done, "completed": done - failed, "failed": failed,
            "cancelled": state.store.counts().get("cancelled", 0)}


def _anchor_totals(state: ServerState) -> dict[str, int]:
    """Finished tasks by the status the KernelGYM routes give each (`completed` for an exception in
    forward, as /results and /evaluate/batch say it; stored_totals counts the native status)."""
    counts = {"completed": 0, "failed": 0}
    for (outcome, kind), n in state.store.verdict_counts().items():
        try:
            counts[finished_status(EvalOutcome(outcome), kind)] += n
        except ValueError:  # an outcome written by a newer version: count it as a failure
            counts["failed"] += n
    return {"total_processed": counts["completed"] + counts["failed"], **counts,
            "cancelled": state.store.counts().get("cancelled", 0)}


def _is_error(outcome: str) -> bool:
    try:
        return EvalOutcome(outcome).status.is_error()
    except ValueError:  # an outcome written by a newer version: count it as a failure
        return True


def health_body(state: ServerState) -> dict[str, Any]:
    """The KernelGym-shaped /health (SystemHealthResponse's keys, with real numbers)."""
    sched = state.scheduler
    cap = capacity(state)
    depth = sched.depth()
    totals = _anchor_totals(state)
    return {
        "status": anchor_health_status(cap),
        "degraded": health_status(cap) == "degraded",
        "timestamp": now_iso(),
        "gpu_status": _gpu_status(_workers(state)),
        "memory_usage": _memory_usage(),
        "version": "0.1.0",
        "uptime": time.time() - sched.started_at,
        "queue_status": {"pending": sum(depth.values()), "processing": sched.running(),
                         "completed": totals["completed"], **depth},
        "active_tasks": sched.running(),
        **totals,
        "workers": {"total": cap["configured"], **{s: cap[s] for s in _WORKER_STATES}},
        "workers_alive": cap["alive"],
        "workers_configured": cap["configured"],
        "workers_lost": max(0, cap["configured"] - cap["alive"] - cap.get("starting", 0)),
        "executor": type(state.executor).__name__,
    }


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    return health_body(server_state(request))


@router.get("/workers/status")
async def workers_status(request: Request) -> dict[str, Any]:
    """The anchor's worker registry: worker id -> device, status, last heartbeat, node, host."""
    host = socket.gethostname()
    return {w["worker_id"]: {
        "device": w["device"],
        "status": "offline" if w["state"] == "dead" else "online",
        "last_heartbeat": iso(w.get("last_change")),
        "node_id": "",
        "hostname": host,
        "state": w["state"],
        "current_task": w["current_task"],
        "tasks_done": w["tasks_done"],
        "restarts": w["restarts"],
    } for w in _workers(server_state(request))}


@router.get("/v1/workers")
async def workers_native(request: Request) -> dict[str, Any]:
    workers = _workers(server_state(request))
    return {
        "workers": workers,  # each with host, node_id (Ray), device, pid, state and last_error
        "total_workers": len(workers),
        "active_workers": sum(1 for w in workers if w["state"] in ("idle", "busy")),
        "busy_workers": sum(1 for w in workers if w["state"] == "busy"),
    }


@router.get("/queue/status")
async def queue_status(request: Request) -> dict[str, Any]:
    state = server_state(request)
    depth = state.scheduler.depth()
    pending = sum(depth.values())
    return {"pending": pending, "pending_by_prefix": {"drkernel": pending}, "worker_queues": {},
            "pending_by_priority": depth, "running": state.scheduler.running(),
            "max_queue": state.settings.max_queue}


def _line(name: str, value: float, **labels: Any) -> str:
    if labels:
        text = ",".join(f'{k}="{str(v).replace(chr(34), "")}"' for k, v in labels.items())
        return f"{name}{{{text}}} {value:g}"
    return f"{name} {value:g}"


def render_metrics(state: ServerState) -> str:
    """Prometheus text exposition (version 0.0.4) of the live counters and gauges."""
    sched = state.scheduler
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[str]) -> None:
        out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples])

    depth = sched.depth()
    metric("drkernel_queue_depth", "gauge", "Queued tasks by priority.",
           [_line("drkernel_queue_depth", n, priority=p) for p, n in depth.items()])
    metric("drkernel_running_tasks", "gauge", "Tasks being evaluated.",
           [_line("drkernel_running_tasks", sched.running())])
    metric("drkernel_tasks_submitted_total", "counter", "Tasks accepted since start.",
           [_line("drkernel_tasks_submitted_total", sched.counters["submitted"])])
    metric("drkernel_tasks_finished_total", "counter", "Tasks finished since start, by outcome.",
           [_line("drkernel_tasks_finished_total", sched.outcomes.get(o.value, 0), outcome=o.value)
            for o in EvalOutcome])
    for key, help_text in (("cancelled", "Tasks cancelled."), ("rejected", "Tasks refused (429)."),
                           ("recovered", "Tasks re-queued from the store at start."),
                           ("purged", "Finished tasks deleted past retention.")):
        metric(f"drkernel_tasks_{key}_total", "counter", help_text,
               [_line(f"drkernel_tasks_{key}_total", sched.counters[key])])
    metric("drkernel_eval_seconds", "summary", "Wall time of evaluations.",
           [_line("drkernel_eval_seconds_sum", sched.eval_seconds),
            _line("drkernel_eval_seconds_count", sched.counters["finished"])])
    counts = state.store.counts()
    metric("drkernel_stored_tasks", "gauge", "Tasks in the store by state.",
           [_line("drkernel_stored_tasks", counts.get(s, 0), state=s)
            for s in ("queued", "running", "done", "cancelled")])
    workers = _workers(state)
    outcomes = state.store.outcome_counts()
    metric("drkernel_stored_results", "gauge", "Finished tasks in the store by outcome "
           "(survives restarts; purged past retention).",
           [_line("drkernel_stored_results", outcomes.get(o.value, 0), outcome=o.value)
            for o in EvalOutcome])
    metric("drkernel_executor_retries_total", "counter",
           "Tasks retried inside the executor (worker lost, judge frozen or faulty).",
           [_line("drkernel_executor_retries_total", sched.counters["executor_retries"])])
    cap = capacity(state)
    metric("drkernel_workers_configured", "gauge", "Workers the executor was configured with.",
           [_line("drkernel_workers_configured", cap["configured"])])
    metric("drkernel_workers_alive", "gauge", "Workers able to take a task (idle or busy).",
           [_line("drkernel_workers_alive", cap["alive"])])
    metric("drkernel_worker_state", "gauge", "1 for the current state of each worker.",
           [_line("drkernel_worker_state", 1 if w["state"] == s else 0, worker=w["worker_id"],
                  device=w["device"], host=w.get("host") or "", node=w.get("node_id") or "",
                  state=s) for w in workers for s in _WORKER_STATES])
    metric("drkernel_worker_tasks_total", "counter", "Evaluations finished per worker.",
           [_line("drkernel_worker_tasks_total", w["tasks_done"], worker=w["worker_id"])
            for w in workers])
    metric("drkernel_worker_restarts_total", "counter", "Restarts per worker.",
           [_line("drkernel_worker_restarts_total", w["restarts"], worker=w["worker_id"])
            for w in workers])
    metric("drkernel_uptime_seconds", "gauge", "Seconds since the server started.",
           [_line("drkernel_uptime_seconds", time.time() - sched.started_at)])
    return "\n".join(out) + "\n"


def metrics_body(state: ServerState) -> dict[str, Any]:
    """The anchor's MetricsResponse, with real counters where it has placeholders."""
    sched = state.scheduler
    finished = sched.counters["finished"]
    outcomes = dict(sched.outcomes)
    ok = outcomes.get(EvalOutcome.OK.value, 0)
    uptime = max(time.time() - sched.started_at, 1e-9)
    host = _memory_usage()
    return {
        "timestamp": now_iso(),
        "performance_metrics": {
            "avg_processing_time": sched.eval_seconds / finished if finished else 0.0,
            "throughput_per_hour": finished / uptime * 3600,
            "success_rate": ok / finished if finished else 0.0,
        },
        "resource_metrics": {"avg_gpu_utilization": 0.0,  # not measured (no CUDA in the API)
                             "memory_usage_percent": host.get("memory_percent", 0.0),
                             "cpu_usage_percent": host.get("cpu_percent", 0.0)},
        "queue_metrics": {"pending_tasks": sum(sched.depth().values()),
                          "active_tasks": sched.running(), "completed_tasks": finished},
        "error_metrics": {  # by the error_code /results gives each task (anchor.error_code)
            "compilation_errors": sched.error_codes.get("COMPILATION_ERROR", 0),
            "runtime_errors": sched.error_codes.get("RUNTIME_ERROR", 0),
            "timeout_errors": sched.error_codes.get("TIMEOUT_ERROR", 0),
        },
    }


def _prometheus(state: ServerState) -> PlainTextResponse:
    return PlainTextResponse(render_metrics(state),
                             media_type="text/plain; version=0.0.4; charset=utf-8")


def _cell(value: Any, key: str = "") -> str:
    """A value as a person reads it: durations as 1h 02m 03s, counts as 'pending 3, high 1', none as '-'."""
    if value is None:
        return "-"
    if key == "uptime" and isinstance(value, (int, float)):
        s = int(value)
        return f"{s // 3600}h {s % 3600 // 60:02d}m {s % 60:02d}s"
    if isinstance(value, dict):
        return ", ".join(f"{k.replace('_', ' ')} {_cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)




@router.get("/metrics", response_model=None)
async def metrics(request: Request) -> Response | dict[str, Any]:
    """JSON (the anchor's MetricsResponse); Prometheus text when the scraper asks for it."""
    accept = request.headers.get("accept", "")
    if "text/plain" in accept or "openmetrics" in accept:
        return _prometheus(server_state(request))
    return metrics_body(server_state(request))


@router.get("/v1/metrics")
async def metrics_text(request: Request) -> PlainTextResponse:
    return _prometheus(server_state(request))


@router.get("/", response_model=None)
async def root(request: Request) -> Response | dict[str, Any]:
    """The anchor's service description; a browser (Accept: text/html) gets the status page."""
    if "text/html" in request.headers.get("accept", ""):
        return await status_page(request)
    return {"name": "drkernel", "version": "0.1.0",
            "description": "GPU Kernel Evaluation Service (KernelGYM-compatible)",
            "timestamp": now_iso()}


@router.get("/v1/status")
async def status_page(request: Request) -> HTMLResponse:
    """A small self-refreshing status page for a browser."""
    state = server_state(request)
    body = health_body(state)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(w[k]))}</td>" for k in
                         ("worker_id", "host", "node_id", "device", "pid", "state",
                          "current_task", "tasks_done", "restarts", "last_error"))
        + "</tr>" for w in _workers(state))
    summary = "".join(f"<li>{html.escape(k.replace('_', ' '))}: {html.escape(_cell(v, k))}</li>"
                      for k, v in body.items() if k not in ("timestamp",))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>drkernel serve</title>
<meta http-equiv="refresh" content="5"><style>body{{font-family:sans-serif;margin:2em}}
td,th{{border:1px solid #ccc;padding:4px 8px}}table{{border-collapse:collapse}}</style></head>
<body><h1>drkernel serve</h1><ul>{summary}</ul><h2>Workers</h2><table><tr><th>worker</th>
<th>host</th><th>Ray node</th><th>device</th><th>pid</th><th>state</th><th>task</th><th>done</th>
<th>restarts</th><th>last error</th></tr>{rows}</table>
<p><a href="/v1/metrics">/v1/metrics</a> · <a href="/docs">/docs</a></p></body></html>"""
    return HTMLResponse(page)
