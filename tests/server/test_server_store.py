"""TaskStore: durable across reopen, idempotent submission, transitions, retention."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from drkernel.server.store import NewTask, TaskConflict, TaskStore
from drkernel.types import EvalOutcome, EvalRequest, EvalResult


def task(task_id: str, code: str = "k", priority: str = "normal") -> NewTask:
    return NewTask(EvalRequest(reference_code="r", kernel_code=code, task_id=task_id), priority)


def test_tasks_and_results_survive_reopening(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    store = TaskStore(db)
    store.submit([task("a"), task("b")])
    assert store.mark_running("a") is not None
    assert store.finish("a", EvalResult(outcome=EvalOutcome.OK, correct=True))
    store.close()
    again = TaskStore(db)
    a, b = again.get("a"), again.get("b")
    assert a and a.state == "done" and a.result and a.result.correct
    assert b and b.state == "queued" and b.request.kernel_code == "k"


def test_interrupted_tasks_are_requeued_oldest_first(tmp_path: Path) -> None:
    store = TaskStore(str(tmp_path / "t.db"))
    store.submit([task("a"), task("b", priority="high"), task("c")])
    store.mark_running("a")
    assert store.requeue_interrupted() == 1
    assert [t for t, _, _ in store.queued()] == ["a", "b", "c"]
    assert store.get("a").attempts == 1  # type: ignore[union-attr]


def test_submission_is_idempotent_and_conflicts_are_refused(tmp_path: Path) -> None:
    store = TaskStore(str(tmp_path / "t.db"))
    [(_, created)] = store.submit([task("a")])
    [(_, again)] = store.submit([task("a")])
    assert created and not again
    with pytest.raises(TaskConflict, match="it differs in kernel_code") as info:
        store.submit([task("a", code="other")])
    assert info.value.task_id == "a"
    store.mark_running("a")
    store.finish("a", EvalResult(outcome=EvalOutcome.OK))
    forced = task("a", code="other")
    forced.force = True
    [(record, created)] = store.submit([forced])
    assert created and store.get("a").state == "queued"  # type: ignore[union-attr]


def test_a_cancelled_task_keeps_no_late_result(tmp_path: Path) -> None:
    store = TaskStore(str(tmp_path / "t.db"))
    store.submit([task("a")])
    store.mark_running("a")
    assert store.cancel("a") == "running"
    assert not store.finish("a", EvalResult(outcome=EvalOutcome.OK))
    assert store.get("a").state == "cancelled"  # type: ignore[union-attr]
    assert store.cancel("missing") is None


def test_retention_purges_only_old_finished_tasks(tmp_path: Path) -> None:
    store = TaskStore(str(tmp_path / "t.db"))
    store.submit([task("old"), task("queued")])
    store.mark_running("old")
    store.finish("old", EvalResult(outcome=EvalOutcome.OK))
    assert store.purge(time.time() - 60) == 0
    assert store.purge(time.time() + 1) == 1
    assert store.get("old") is None and store.get("queued") is not None
    assert store.counts() == {"queued": 1}


def test_the_task_id_rule_doctest_passes() -> None:
    import doctest

    import drkernel.server.store as store

    result = doctest.testmod(store)
    assert result.attempted > 0 and result.failed == 0


def test_a_result_this_version_cannot_read_is_an_infra_error_not_a_crash(tmp_path: Path) -> None:
    """A result written by a newer version (an outcome this one lacks) raised ValueError on every read:
    GET /v1/tasks/{id}, /results/{id} and any /v1/tasks/wait naming it were 500s, the whole wait lost."""
    store = TaskStore(str(tmp_path / "t.db"))
    store.submit([task("newer"), task("plain")])
    assert store.finish("newer", EvalResult(outcome=EvalOutcome.OK))
    with store._lock:
        store._db.execute("UPDATE tasks SET result=? WHERE task_id='newer'",
                          ('{"outcome": "quantum_error", "future": 1}',))
    record = store.get("newer")
    assert record is not None and record.result is not None
    assert record.result.outcome is EvalOutcome.INFRA_ERROR and record.result.task_id == "newer"
    assert record.result.error is not None and record.result.error.kind == "unreadable_result"
    assert "quantum_error" in record.result.error.message
    assert set(store.get_many(["newer", "plain"])) == {"newer", "plain"}
