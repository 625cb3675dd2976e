"""Which check catches the sealed span's early answer (tests/assets/attacks/sealed_early_answer.py)
on a GPU: the attack evaluated with the span's charge as built, and with it switched off (the gap
alone, as before the work null), each `--trials` times, at 1024^2 and 4096^2. Prints each result's
hacks and the span's parts, so the GPU test can assert the one check that holds (run BL).

    PYTHONPATH=. python3 bench/probes/early_answer.py [--trials 2]
"""

from __future__ import annotations

import argparse
import sys

from drkernel.sandbox.judge import Judge
from drkernel.sandbox.stages import sealed
from drkernel.types import EvalOptions, EvalRequest
from tests.sandbox.corpus import ASSETS, reference_code


def problem(rows: int, cols: int) -> str:
    return reference_code("relu_scale").replace("batch_size = 8", f"batch_size = {rows}").replace(
        "dim = 256", f"dim = {cols}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args()
    code = (ASSETS / "attacks" / "sealed_early_answer.py").read_text()
    opts = EvalOptions(num_correct_trials=3, num_perf_trials=50, num_warmup=3, timeout_s=300.0,
                       static_policy=False)
    charged = sealed._charged
    print(f"{'charge':6s} {'shape':>10s} {'outcome':15s} {'hacks':40s} parts")
    with Judge(device="cuda", cache_path=None) as judge:
        for charge in ("on", "off"):
            sealed._charged = charged if charge == "on" else (lambda gap, *a, **k: gap)  # type: ignore[assignment]
            for rows, cols in ((1024, 1024), (4096, 4096)):
                for _ in range(args.trials):
                    r = judge.evaluate(EvalRequest(reference_code=problem(rows, cols), kernel_code=code,
                                                   options=opts))
                    t = r.kernel_timing
                    parts = {k: round(v, 4) for k, v in ((t.sealed_parts or {}) if t else {}).items()}
                    print(f"{charge:6s} {f'{rows}x{cols}':>10s} {r.outcome.value:15s} "
                          f"{','.join(sorted(r.hacks)):40s} {parts}", flush=True)
    sealed._charged = charged
    return 0


if __name__ == "__main__":
    sys.exit(main())
