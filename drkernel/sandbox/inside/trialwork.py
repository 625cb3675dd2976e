"""Inside the sandboxes: the correctness trials' ops (stages/correctness.py says what the judge makes of
them). run forwards each seed's inputs, writes the outputs as tensor files and reports aliasing, mutated
inputs and launches (the blocks the allocator hands out next poisoned first, in a candidate's sandbox);
modes counts the submission's own launches in train/eval x grad/no-grad. Each op takes the sandbox it runs
in (`Box`) and its request, and gives its reply or an ErrorReply.
"""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

import torch

from drkernel.sandbox.inside import harness
from drkernel.sandbox.inside.failure import classify_forward_error, error
from drkernel.sandbox.wire import protocol as P
from drkernel.sandbox.wire import tensorfile

__all__ = ["OPS", "Box"]

_perf = time.perf_counter  # captured before any candidate code runs


class Box(Protocol):
    """What the trials' ops use of the sandbox they run in (inside/worker.Sandbox, which holds to it:
    worker._conforms_trial). `_poison_sizes` are the sizes of the outputs so far, the blocks to poison."""

    role: str
    device: torch.device
    workdir: str
    model: Any
    _poison_sizes: set[int]
    recorder: harness.LaunchRecorder
    watch: harness.TamperWatch
    threads: harness.ThreadWatch

    def _sync(self) -> None: ...
    def _inputs(self, seed: int) -> list[Any]: ...
    def _forward(self, inputs: list[Any]) -> Any: ...


def _save(box: Box, out: Any, name: str) -> dict[str, Any]:
    """Write the outputs to `name`; what they are, as fields of an OutputItem."""
    structure, tensors = harness.flatten_outputs(out)
    info: dict[str, Any] = {"structure": structure, "subclass": [], "dtypes": [], "shapes": []}
    plain = []
    for i, t in enumerate(tensors):
        if type(t) is not torch.Tensor:
            info["subclass"].append(f"output {i} is {type(t).__name__}")
            t = torch.Tensor(t.detach().cpu()) if hasattr(t, "detach") else torch.empty(0)
        info["dtypes"].append(str(t.dtype))
        info["shapes"].append(list(t.shape))
        plain.append(t)
    path = os.path.join(box.workdir, name)
    tensorfile.write_tensors(path, plain)  # a copy: later writes do not reach it
    info["file"] = name
    return info


def _poison(box: Box) -> None:
    """Overwrite the blocks the allocator will hand out next with NaN bit patterns.

    Allocating exactly the sizes of earlier outputs gets those freed blocks back from the
    caching allocator (best fit), so a kernel that returns torch.empty() without writing it
    reads NaN instead of a stale earlier result.
    """
    if box.role != "candidate":
        return
    for nbytes in sorted(box._poison_sizes):
        block = torch.empty(nbytes, dtype=torch.uint8, device=box.device)
        block.fill_(255)
        del block


def _remember_sizes(box: Box, tensors: list[Any]) -> None:
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            box._poison_sizes.add(t.untyped_storage().nbytes())


def run(box: Box, msg: P.Run) -> P.RunReply | P.ErrorReply:
    """Forward each seed's inputs; save outputs; report aliasing, mutation, launches."""
    items = []
    previous: list[Any] = []  # the last call's outputs, kept alive so their blocks cannot be reused
    for k, seed in enumerate(msg.seeds):
        inputs = box._inputs(seed)
        saved = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
        _poison(box)
        box.recorder.take()
        t0 = _perf()
        try:
            with torch.no_grad():
                out = box._forward(inputs)
            box._sync()
        except BaseException as exc:  # noqa: BLE001
            return error(classify_forward_error(exc), exc)
        forward_s = _perf() - t0
        launches = box.recorder.take()
        _, outs = harness.flatten_outputs(out)
        _remember_sizes(box, outs)
        params = [p for p in box.model.parameters()] if isinstance(box.model, torch.nn.Module) else []
        try:
            saved_info = _save(box, out, f"{msg.tag}_{k}.pt")
        except tensorfile.TensorFileError as exc:
            return error("unsupported_output", exc)
        mutated = any(isinstance(a, torch.Tensor) and not _same(a, b)
                      for a, b in zip(inputs, saved, strict=True))
        items.append(P.OutputItem(
            **saved_info, launches=launches,
            forward_s=round(forward_s, 6),  # the first includes the JIT compile of its kernels
            aliases_input=_overlaps(outs, [t for t in inputs if isinstance(t, torch.Tensor)]),
            aliases_param=_overlaps(outs, params), aliases_previous=_overlaps(outs, previous),
            mutated_input=mutated, threads=box.threads.extra()))
        previous = outs
    return P.RunReply(items=items, tampered=box.watch.changed())


def modes(box: Box, msg: P.Modes) -> P.ModesReply | P.ErrorReply:
    """Own launches in train/eval x grad/no-grad (docs/paper_spec.md §3.3 recommendation)."""
    inputs = box._inputs(msg.seed)
    result = {}
    module = box.model if isinstance(box.model, torch.nn.Module) else None
    for training in (True, False):
        for grad in (False, True):
            if module is not None:
                module.train(training)
            box.recorder.take()
            try:
                with torch.set_grad_enabled(grad):
                    box._forward(inputs)
                box._sync()
                result[f"{'train' if training else 'eval'}/{'grad' if grad else 'no_grad'}"] = len(
                    box.recorder.take()
                )
            except BaseException as exc:  # noqa: BLE001
                return error(classify_forward_error(exc), exc)
    if module is not None:
        module.train(True)
    return P.ModesReply(modes=result, tampered=box.watch.changed(), threads=box.threads.extra())


def _storages(ts: list[Any]) -> list[tuple[int, int]]:
    spans = []
    for t in ts:
        if isinstance(t, torch.Tensor) and t.numel():
            try:
                s = t.untyped_storage()
                spans.append((s.data_ptr(), s.data_ptr() + s.nbytes()))
            except (RuntimeError, NotImplementedError):
                continue
    return spans


def _overlaps(a: list[Any], b: list[Any]) -> bool:
    sb = _storages(b)
    return any(x0 < y1 and y0 < x1 for x0, x1 in _storages(a) for y0, y1 in sb)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return (bool(torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8)))
            if a.is_contiguous() and b.is_contiguous()
            else bool(torch.equal(a.nan_to_num(), b.nan_to_num())))


OPS: dict[str, Any] = {"run": run, "modes": modes}
