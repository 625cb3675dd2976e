#!/usr/bin/env bash
# Issue 36: `drkernel suite survey` over KernelBench levels 1-3 on the GPU machine, one piece per
# 10-minute device call. The device has no network: KernelBench travels as a packed tree.
#
# Once, on the development machine (network; nothing of KernelBench is committed, .kb/ is ignored):
#   git clone https://github.com/ScalingIntelligence/KernelBench ../kb-src
#   mkdir -p .kb && git -C ../kb-src archive 423217d9 KernelBench/level1 KernelBench/level2 \
#       KernelBench/level3 | tar -x -C .kb        # the commit of docs/audit_kernelbench.md
#   mkdir -p .survey                              # the file of record lives here between calls (ignored)
# Each device call (the `run` tool, carry [".kb", ".survey"]), from the repository root:
#   bash bench/survey_device.sh
# then copy $OUT/kernelbench_h200.json back over .survey/kernelbench_h200.json, and call again until
# the last line says "0 left". Rows already in the file are skipped (--resume); the file is rewritten
# after every problem, so a call cut off loses at most the problem it was on.
# Knobs (environment): LEVELS (1-3); DEVICE (cuda; cpu to try the script here); BUDGET (seconds of
# survey work a call starts, default 480 of the call's 600); EXTRA (more flags, e.g. "--no-compile",
# "--null-trials 3" or "--nulls zeros,constant,replay"); OUT (where the files and the logs go back);
# PARALLEL=N (on a machine of N GPUs: shard I of N on GPU I-1, each into
# .survey/kernelbench_h200.shardIofN.json; `drkernel suite table` merges them; carry and copy back
# every shard's file). The exit code is the survey's (2: a usage error, in the log).
set -u
OUT=${OUT:-gpu-out}
KB=${KB:-.kb}
STEM=${STEM:-.survey/kernelbench_h200}
PARALLEL=${PARALLEL:-1}
mkdir -p "$OUT" "$(dirname "$STEM")"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ ! -d "$KB/KernelBench/level1" ] && [ ! -d "$KB/level1" ]; then
  echo "survey_device.sh: no KernelBench tree in $KB (pack it first, see the top of this file)" >&2
  exit 2
fi
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
piece() {  # piece FILE LOG [--shard I/N]
  local file=$1 log=$2
  shift 2
  # shellcheck disable=SC2086  # EXTRA is a list of flags
  timeout 590 python3 -m drkernel.cli suite survey "kernelbench:$KB" --levels "${LEVELS:-1-3}" --device "${DEVICE:-cuda}" \
    --out "$file" --resume --budget-s "${BUDGET:-480}" --probe-timeout-s 120 --eval-timeout-s 120 \
    "$@" ${EXTRA:-} > "$log" 2>&1
}
files=()
rc=0
if [ "$PARALLEL" -le 1 ]; then
  files=("$STEM.json")
  piece "$STEM.json" "$OUT/survey.log" || rc=$?
else
  pids=()
  for i in $(seq 1 "$PARALLEL"); do
    files+=("$STEM.shard${i}of$PARALLEL.json")
    CUDA_VISIBLE_DEVICES=$((i - 1)) piece "$STEM.shard${i}of$PARALLEL.json" "$OUT/survey.shard$i.log" \
      --shard "$i/$PARALLEL" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || rc=$?
  done
fi
present=()
for f in "${files[@]}"; do
  [ -f "$f" ] && cp "$f" "$OUT/" && present+=("$f")
done
[ ${#present[@]} -gt 0 ] && python3 -m drkernel.cli suite table "${present[@]}" --markdown --out "$OUT/survey_table.md"
tail -n 2 "$OUT"/survey*.log
exit $rc
