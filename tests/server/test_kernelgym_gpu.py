"""On a GPU: the coverage keys the authors' reward reads are in our anchor answer, and their
time-coverage bonus equals our measured coverage. For the H200 run:
`python -m pytest -m gpu tests/server/test_kernelgym_gpu.py -s` (prints the numbers for
docs/benchmarks.md)."""

from __future__ import annotations

import json

import pytest
import torch

from drkernel.sandbox.judge import Judge
from drkernel.server.anchor import anchor_response
from drkernel.server.store import TaskRecord
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest
from tests.sandbox.corpus import asset, reference_code
from tests.server import kernelgym_models as kg
from tests.server.kernelgym_client import SPEEDUP, coverage, reward_speedup

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_coverage_keys_on_the_gpu_give_the_authors_bonus_from_our_coverage() -> None:
    options = EvalOptions(num_correct_trials=3, num_perf_trials=50, num_warmup=3,
                          timeout_s=300.0, profile=True)
    request = EvalRequest(reference_code=reference_code("relu_scale"),
                          kernel_code=asset("kernels", "relu_scale").code, options=options,
                          task_id="gpu-coverage")
    with Judge(device="cuda", cache_path=None) as judge:
        result = judge.evaluate(request)
    assert result.outcome is EvalOutcome.OK and result.coverage is not None, result
    record = TaskRecord(task_id="gpu-coverage", state="done", priority="normal",
                        request_json=json.dumps(request.to_dict()), result=result, attempts=1,
                        worker="local-0", submitted_at=1.0, started_at=2.0, finished_at=3.0,
                        meta={"api": "anchor", "backend": "triton"})
    body = kg.Evaluation.model_validate(anchor_response(record)).model_dump()
    meta = body["metadata"]
    assert meta["total_kernel_run_time_in_profiling_us"] > 0
    assert coverage(body, SPEEDUP) == pytest.approx(result.coverage)
    bonus = reward_speedup(body)["reward"] - 0.5 - 0.5 * min(body["speedup"], 3.0)
    assert bonus == pytest.approx(0.5 * result.coverage)
    print(f"coverage={result.coverage:.3f} custom_us={meta['custom_kernel_cuda_time_in_profiling_us']:.1f}"
          f" total_us={meta['total_kernel_run_time_in_profiling_us']:.1f} speedup={body['speedup']:.2f}"
          f" reward_speedup={reward_speedup(body)['reward']:.3f}")
