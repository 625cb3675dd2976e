#!/usr/bin/env bash
# Every GPU measurement of docs/benchmarks.md in one call of the lent H200 (about 9 minutes).
# Usage (repository root, on the GPU machine): bash bench/gpu_all.sh        output: $OUT or ./gpu-out
# FastAPI/uvicorn are not on the device image: carry their wheels in .whl/ (see docs/benchmarks.md).
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv > "$OUT/gpu.txt" 2>&1
timeout 120 python3 bench/eval_overhead.py --repeats 10 --mix 12 --out "$OUT" > "$OUT/overhead.log" 2>&1
timeout 200 python3 -m pytest -m gpu tests/sandbox/test_gpu.py -v -rfE -p no:cacheprovider \
  -W ignore::pytest.PytestConfigWarning -o timeout=60 > "$OUT/gpu_tests.log" 2>&1
timeout 80 python3 bench/service_throughput.py --batch 24 --rounds 1 --latency-samples 3 > "$OUT/service.log" 2>&1
timeout 130 python3 bench/suite_gpu.py --perf-trials 20 --json "$OUT/suite.json" > "$OUT/suite.log" 2>&1
tail -n 12 "$OUT/overhead.log"; grep -E "PASSED|FAILED|ERROR" "$OUT/gpu_tests.log" | grep -c PASSED
grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -20; tail -n 8 "$OUT/service.log"; tail -n 30 "$OUT/suite.log"
