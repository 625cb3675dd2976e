#!/usr/bin/env bash
# The GPU measurements of docs/benchmarks.md, in parts that fit 10-minute calls of the lent H200.
# Usage (repository root, on the GPU machine): bash bench/gpu_all.sh PART [PART ...]
#   judge    overhead and tests, below                                                 (~7 min)
#   overhead bench/eval_overhead.py: fixed cost, throughput, speedup spread, coverage    (~2 min)
#   tests    tests/sandbox/test_gpu.py, the GPU-only checks                            (~5 min)
#   service  bench/service_throughput.py (issue 3)                                     (~1 min)
#   rl       experiments/rl_gpu_demo (issue 7)                                         (~3 min)
#   suite    bench/suite_gpu.py over the built-in suite (issue 6)                      (~3 min)
#   agent    bench/agent_gpu_demo.py (issue 5)                                         (~8 min)
#   baselines `drkernel suite baselines builtin:gpu --backend both` (issue 6)          (~2 min)
#   speed    bench/judge_speed.py: speedup spread vs graph replay, throughput (issue 14) (~5 min)
#            SPEED_ARGS narrows it, e.g. SPEED_ARGS="--shapes 1024x1024 --judges 4 --throughput 24"
#   probe    bench/probes/timing_probe.py at 1024²: which part of the judge's window makes small kernels
#            slow (25-call windows, the flush, the refill; issue 14)                      (~1 min)
#   bisect   bench/probes/timing_bisect.py: the judge's own timing ops in plain processes at 1024², beside
#            graph replay: is the small-kernel bias in the timing code or around it (issue 14) (~1 min)
#            with SPEED_ARGS="--shapes 1024x1024 --throughput 0 --pause 6", `speed` tells whether the
#            spares that start beside a timed candidate cause it
#   peak     bench/probes/peak_probe.py: each way of measuring the bandwidth ceiling beside the honest
#            read-only 107 solution that a copy-only ceiling flagged as faster_than_light   (~1 min)
#   profwarm bench/probes/profiler_warm.py: the candidate sandbox's first profiler session, each way of
#            warming it: wall and CPU seconds, what it replaces, whether a later session still
#            sees the kernels (issue 14: 5.6 s of a single eval in run Y)                 (~1 min)
#   latency  bench/eval_latency.py: where a single `drkernel eval`'s seconds go (issue 14 target 3) (~1 min)
#   seccomp  bench/probes/seccomp_cost.py: what the sandbox's seccomp filter costs CPU-bound work   (~1 min)
#   disturb  bench/probes/disturb_probe.py: which other processes' work slows a timed window (sandbox start and
#            exit, unlocked kernels, cudaMalloc/cudaFree, a busy host; issue 14 precision)  (~1 min)
#   rhythm   bench/serve_rhythm.py: `drkernel serve` with no flags, ready time, bursts through the
#            project's Client and the authors'-style client with idle minutes between (issue 33);
#            RHYTHM_ARGS, e.g. "--rounds 3 --idle-s 100"                                  (~6 min)
#   rhythm_start, rhythm_wait   the same, detached, for the full rhythm across two calls (RHYTHM_ARGS="--burst 64
#            --rounds 5 --idle-s 180": ~16 min): rhythm_start waits RHYTHM_WAIT (560) s, rhythm_wait as long again
#   retry    bench/probes/pool_retry_probe.py: a judge fault retried in the judge, a frozen judge process
#            retried by the pool on a fresh one (issue 37)                                   (~1 min)
#   twogpu   issue 38 on an nvidia-h200-x2 (two GPUs): tests/sandbox/test_gpu_two.py (placement, locks), then
#            bench/serve_rhythm.py with no flags on GPU 0 alone and on both, bursts through both clients,
#            one after the other in this call; TWOGPU_ARGS, e.g. "--burst 64 --rounds 2 --idle-s 5"  (~8 min)
#   beside   bench/beside_trainer.py on an nvidia-h200-x2: serve on GPU 1, `drkernel train rl` on GPU 0 through it;
#            the judge's spread and the trainer's step time, each alone and beside the other (issue 38) (~6 min)
#   early    bench/probes/early_answer.py: the sealed span's early-answer attack with the span's charge and
#            without it: which check catches it (issue 32)                                    (~1 min)
#   extra    KernelGYM coverage fields on the GPU, isolation attacks on the GPU host,
#            and two single `drkernel eval` runs from the shell, timed (issues 13-15)     (~2 min)
# Logs and tables go to $OUT (or ./gpu-out). Parts may run side by side on different GPUs:
#   CUDA_VISIBLE_DEVICES=0 bash bench/gpu_all.sh judge & CUDA_VISIBLE_DEVICES=1 bash bench/gpu_all.sh rl service suite; wait
# FastAPI/uvicorn are not on the device image: carry their wheels in .whl/ (see docs/benchmarks.md).
set -u
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ] && [ ! -d /tmp/site/fastapi ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >/dev/null 2>&1
fi
[ -d /tmp/site ] && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
overhead() {
  timeout 170 python3 bench/eval_overhead.py --repeats 10 --mix 12 --out "$OUT" > "$OUT/overhead.log" 2>&1
}
tests() {
  timeout ${TESTS_TIMEOUT:-420} python3 -m pytest -m gpu tests/sandbox/test_gpu.py -v -rfE -p no:cacheprovider \
    -W ignore::pytest.PytestConfigWarning -o timeout=60 ${TESTS_ARGS:-} > "$OUT/gpu_tests.log" 2>&1
}
verdict=""
RHYTHM_DIR=${RHYTHM_DIR:-/tmp/drkernel-rhythm}
rhythm_wait() {  # the detached rhythm run (rhythm_start): wait up to RHYTHM_WAIT s, copy what it wrote
  local waited=0
  while [ ! -f "$RHYTHM_DIR/exit" ] && [ "$waited" -lt "${RHYTHM_WAIT:-560}" ]; do
    sleep 5
    waited=$((waited + 5))
  done
  cp "$RHYTHM_DIR"/serve_rhythm.* "$OUT/" 2>/dev/null
  if [ -f "$RHYTHM_DIR/exit" ]; then
    echo "rhythm: finished, exit code $(cat "$RHYTHM_DIR/exit")" | tee -a "$OUT/serve_rhythm.status"
  else
    echo "rhythm: still running after ${waited} s of this call: call 'bash bench/gpu_all.sh rhythm_wait' within 30 s" \
      | tee -a "$OUT/serve_rhythm.status"
  fi
}
for part in "$@"; do
  case $part in
  judge) overhead; tests ;;
  overhead) overhead ;;
  tests) tests ;;
  service)
    # SERVICE_ARGS adds options, e.g. SERVICE_ARGS="--judges-per-gpu 4"
    timeout "${SERVICE_TIMEOUT:-100}" python3 bench/service_throughput.py --batch 24 --rounds 1 --latency-samples 3 \
      ${SERVICE_ARGS:-} > "$OUT/service.log" 2>&1 ;;
  rl)
    timeout 240 python3 experiments/rl_gpu_demo/run.py --device cuda --out "$OUT/rl_gpu_demo" > "$OUT/rl.log" 2>&1 ;;
  suite)
    # SUITE_ARGS adds options, e.g. SUITE_ARGS="--shape-variants"
    timeout "${SUITE_TIMEOUT:-300}" python3 bench/suite_gpu.py --perf-trials 20 --stages --json "$OUT/suite.json" \
      ${SUITE_ARGS:-} > "$OUT/suite.log" 2>&1 ;;
  agent)
    # AGENT_ARGS narrows the demo to fit a call, e.g. AGENT_ARGS="--limit 3" or AGENT_ARGS="--plans 2,3"
    timeout "${AGENT_TIMEOUT:-500}" python3 bench/agent_gpu_demo.py --out "$OUT/agent_gpu_demo" --samples 2 \
      --perf-trials 20 ${AGENT_ARGS:-} > "$OUT/agent.log" 2>&1 ;;
  baselines)
    timeout "${BASELINES_TIMEOUT:-200}" python3 -m drkernel.cli suite baselines builtin:gpu --device cuda \
      --backend both --store "$OUT/baselines.json" > "$OUT/baselines.log" 2>&1 ;;
  speed)
    timeout "${SPEED_TIMEOUT:-420}" python3 bench/judge_speed.py --json "$OUT/judge_speed.json" ${SPEED_ARGS:-} \
      > "$OUT/speed.log" 2>&1 ;;
  rhythm)
    timeout "${RHYTHM_TIMEOUT:-560}" python3 bench/serve_rhythm.py --json "$OUT/serve_rhythm.json" ${RHYTHM_ARGS:-} \
      > "$OUT/serve_rhythm.log" 2>&1 ;;
  rhythm_start)
    # the full rhythm (5 bursts, 180 s idle: ~16 min) outlives a 10-minute call: run it detached (a new
    # session survives the call), wait up to RHYTHM_WAIT s, and finish with `rhythm_wait` in the next
    # call, within the 30 s the machine stays warm
    rm -rf "$RHYTHM_DIR" && mkdir -p "$RHYTHM_DIR"
    # shellcheck disable=SC2086  # RHYTHM_ARGS is a list of flags
    setsid bash -c 'python3 bench/serve_rhythm.py --json "$0/serve_rhythm.json" $1 > "$0/serve_rhythm.log" 2>&1;
                    echo $? > "$0/exit"' "$RHYTHM_DIR" "${RHYTHM_ARGS:-}" < /dev/null > /dev/null 2>&1 &
    rhythm_wait ;;
  rhythm_wait)
    rhythm_wait ;;
  retry)
    timeout "${RETRY_TIMEOUT:-150}" python3 bench/probes/pool_retry_probe.py > "$OUT/retry.log" 2>&1 ;;
  beside)
    # shellcheck disable=SC2086  # BESIDE_ARGS is a list of flags
    timeout "${BESIDE_TIMEOUT:-560}" python3 bench/beside_trainer.py --judge-gpu 1 --train-device cuda:0 \
      --json "$OUT/beside.json" ${BESIDE_ARGS:-} > "$OUT/beside.log" 2>&1 ;;
  twogpu)
    timeout 150 python3 -m pytest -m gpu tests/sandbox/test_gpu_two.py -v -rfE -p no:cacheprovider \
      -W ignore::pytest.PytestConfigWarning -o timeout=120 > "$OUT/twogpu_tests.log" 2>&1
    # shellcheck disable=SC2086  # TWOGPU_ARGS is a list of flags
    CUDA_VISIBLE_DEVICES=0 timeout 200 python3 bench/serve_rhythm.py --json "$OUT/rhythm_1gpu.json" \
      ${TWOGPU_ARGS:---burst 64 --rounds 2 --idle-s 5} > "$OUT/rhythm_1gpu.log" 2>&1
    # shellcheck disable=SC2086
    timeout 200 python3 bench/serve_rhythm.py --json "$OUT/rhythm_2gpu.json" \
      ${TWOGPU_ARGS:---burst 128 --rounds 2 --idle-s 5} > "$OUT/rhythm_2gpu.log" 2>&1 ;;
  probe)
    timeout "${PROBE_TIMEOUT:-150}" python3 bench/probes/timing_probe.py --procs 3 --shapes 1024x1024 \
      --methods ${PROBE_METHODS:-graph,graphspin25,graphrefill25,graphprof25} --json "$OUT/probe.json" > "$OUT/probe.log" 2>&1 ;;
  bisect)
    timeout "${BISECT_TIMEOUT:-150}" python3 bench/probes/timing_bisect.py --procs 3 ${BISECT_ARGS:-} --json "$OUT/bisect.json" > "$OUT/bisect.log" 2>&1 ;;
  early)
    timeout "${EARLY_TIMEOUT:-150}" python3 bench/probes/early_answer.py ${EARLY_ARGS:-} > "$OUT/early.log" 2>&1 ;;
  peak)
    timeout 150 python3 bench/probes/peak_probe.py > "$OUT/peak.log" 2>&1 ;;
  latency)
    timeout "${LATENCY_TIMEOUT:-150}" python3 bench/eval_latency.py --device cuda --json "$OUT/latency.json" \
      > "$OUT/latency.log" 2>&1 ;;
  profwarm)
    timeout 200 python3 bench/probes/profiler_warm.py --procs 2 --json "$OUT/profwarm.json" > "$OUT/profwarm.log" 2>&1 ;;
  seccomp)
    timeout 120 python3 bench/probes/seccomp_cost.py --procs 3 > "$OUT/seccomp.log" 2>&1 ;;
  disturb)
    timeout 120 python3 bench/probes/disturb_probe.py --json "$OUT/disturb.json" > "$OUT/disturb.log" 2>&1 ;;
  extra)
    timeout 200 python3 -m pytest -m gpu tests/server/test_kernelgym_gpu.py -v -s -p no:cacheprovider -W ignore::pytest.PytestConfigWarning \
      -o timeout=150 > "$OUT/extra.log" 2>&1
    timeout 200 python3 -m pytest tests/sandbox/test_attacks_isolation.py -v -p no:cacheprovider -W ignore::pytest.PytestConfigWarning \
      -o timeout=150 >> "$OUT/extra.log" 2>&1
    for k in 1 2; do
      { TIMEFORMAT="eval $k wall %R s"; time timeout 120 python3 -m drkernel.cli eval \
        drkernel/examples/relu_scale/reference.py drkernel/examples/relu_scale/kernel.py; } >> "$OUT/extra.log" 2>&1
    done ;;
  *) echo "unknown part $part (judge | overhead | tests | service | rl | suite | agent | baselines | speed | extra | probe | seccomp | bisect | peak | profwarm | latency | disturb | rhythm | rhythm_start | rhythm_wait | retry | twogpu | beside)" >&2
     exit 2 ;;
  esac
done
# One line to read first: did the judge hold on this GPU at this commit?
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -f "$OUT/gpu_tests.log" ]; then
  summary=$(grep -E "^=+ .*(passed|failed|error).* in [0-9.]+s" "$OUT/gpu_tests.log" | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//')
  if [ -z "$summary" ]; then verdict="$verdict tests: NO SUMMARY (cut short?);"
  elif echo "$summary" | grep -qE "(^|[ ,])[0-9]+ (failed|errors?)"; then verdict="$verdict tests: FAILED ($summary);"
  else verdict="$verdict tests: passed ($summary);"; fi
fi
if [ -f "$OUT/suite.log" ]; then
  n=$(grep -oE "^[0-9]+/[0-9]+ correct" "$OUT/suite.log" | tail -1)
  verdict="$verdict suite: ${n:-NO RESULT};"
fi
echo "GPU VERDICT at $commit:${verdict:- nothing run}" | tee -a "$OUT/verdict.txt"
