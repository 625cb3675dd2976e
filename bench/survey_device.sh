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
# then copy $OUT/kernelbench_*.json back over .survey/, and call again until every log's last line
# says "0 left" and no problem is deferred. Rows already in a file are skipped (--resume); the file is
# rewritten after every problem, so a call cut off loses at most the problem it was on.
#
# Several surveys on one GPU (PER_GPU=N; NOT YET MEASURED ON A GPU): a problem's survey is mostly CPU
# (sandbox starts, Triton and torch.compile compiles, the nulls' correctness trials and comparisons)
# while the GPU idles, so N shard processes (`--shard I/N --per-gpu N`, each into its own file) share
# the GPU. The times of record stay undisturbed: the judge times a reference (eager, compiled) and the
# device's peaks with no candidate process alive on the host and the GPU's timing lock held
# exclusively; the other shards' candidates wait for that, and their reference probes hold the lock
# shared (docs/audit_kernelbench.md lists what runs where). Each shard's judge takes 1/N of the
# candidates' memory cap. A problem that fails in a way the other shards may have caused (out of device
# or host memory; a timeout: waiting for their timing counts against a time limit) is not recorded but
# deferred (its row says `deferred`); once the shards are done, each file's deferred problems run again
# with the GPU alone (`--deferred-only`, a shard at a time, in what is left of BUDGET), and are recorded
# whatever happens. Deferred rows not reached wait for the next call. A shard's file that does not exist
# yet starts as a copy of $STEM.json where that exists (the rows of a survey run before without
# shards: each shard skips those of its problems).
#
# Knobs (environment): LEVELS (1-3); DEVICE (cuda; cpu to try the script here); BUDGET (seconds of
# survey work a call starts, default 480 of the call's 600); EXTRA (more flags, e.g. "--no-compile",
# "--null-trials 3" or "--nulls zeros,constant,replay"); OUT (where the files and the logs go back);
# PARALLEL=G (on a machine of G GPUs: shards on each, GPU by GPU); PER_GPU=N (N shards on each GPU,
# default 1); SOLO_S (of BUDGET, the seconds kept for the deferred problems alone, default 60 with
# PER_GPU > 1; the alone phase also gets what the shards leave of BUDGET); EVAL_TIMEOUT (seconds for
# one evaluation: 120, and 240 while shards share a GPU); CALL_S (no piece runs past this many seconds
# of the call, default 590). With S = G x N shards, shard I runs on GPU (I-1)/N (PARALLEL > 1) into
# .survey/kernelbench_<card>.shardIofS.json (`drkernel suite table` merges them; carry and copy back every
# shard's file; later calls must keep S, or the shards' problems change). The exit code is the last
# failing survey's (2: a usage error, in its log; 124: cut off at CALL_S).
set -u
OUT=${OUT:-gpu-out}
KB=${KB:-.kb}
# the file of record is named after the card (h200, h100, ...): a survey's times and floors are its card's,
# and a file of one card resumed on another is refused (drkernel suite survey)
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr '[:upper:]' '[:lower:]' |
       grep -o '[a-z][0-9][0-9][0-9]*' | head -1)
[ "${DEVICE:-cuda}" = cpu ] && card=cpu
STEM=${STEM:-.survey/kernelbench_${card:-gpu}}
PARALLEL=${PARALLEL:-1}
PER_GPU=${PER_GPU:-1}
BUDGET=${BUDGET:-480}
CALL_S=${CALL_S:-590}
SHARDS=$((PARALLEL * PER_GPU))
ALONE_TIMEOUT=${EVAL_TIMEOUT:-120}
if [ "$PER_GPU" -gt 1 ]; then
  SOLO_S=${SOLO_S:-60}
  EVAL_TIMEOUT=${EVAL_TIMEOUT:-240}
else
  SOLO_S=0
  EVAL_TIMEOUT=$ALONE_TIMEOUT
fi
mkdir -p "$OUT" "$(dirname "$STEM")"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ ! -d "$KB/KernelBench/level1" ] && [ ! -d "$KB/level1" ]; then
  echo "survey_device.sh: no KernelBench tree in $KB (pack it first, see the top of this file)" >&2
  exit 2
fi
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
piece() {  # piece GPU FILE LOG BUDGET_S [FLAGS...]: one survey, its command line first in its log
  local gpu=$1 file=$2 log=$3 budget=$4
  shift 4
  # shellcheck disable=SC2206  # EXTRA is a list of flags
  local cmd=(python3 -m drkernel.cli suite survey "kernelbench:$KB" --levels "${LEVELS:-1-3}"
             --device "${DEVICE:-cuda}" --out "$file" --resume --budget-s "$budget" --probe-timeout-s 120
             "$@" ${EXTRA:-})
  local visible=() limit=$((CALL_S - SECONDS))
  [ "$gpu" = "-" ] || visible=("CUDA_VISIBLE_DEVICES=$gpu")
  [ "$limit" -ge 1 ] || limit=1  # `timeout 0` would be no limit at all
  echo "+ ${visible[*]}${visible[*]:+ }${cmd[*]}" > "$log"
  env "${visible[@]}" timeout "$limit" "${cmd[@]}" >> "$log" 2>&1
}
gpu_of() {  # gpu_of I: the GPU of shard I ("-": the one visible, left as it is)
  if [ "$PARALLEL" -le 1 ]; then echo -; else echo $((($1 - 1) / PER_GPU)); fi
}
files=()
rc=0
if [ "$SHARDS" -le 1 ]; then
  files=("$STEM.json")
  piece - "$STEM.json" "$OUT/survey.log" "$BUDGET" --eval-timeout-s "$EVAL_TIMEOUT" || rc=$?
else
  pids=()
  for i in $(seq 1 "$SHARDS"); do
    files+=("$STEM.shard${i}of$SHARDS.json")
    [ -f "${files[i - 1]}" ] || [ ! -f "$STEM.json" ] || cp "$STEM.json" "${files[i - 1]}"
  done
  shared_s=$((BUDGET - SOLO_S))
  if [ "$shared_s" -ge 10 ]; then  # the shards at once
    for i in $(seq 1 "$SHARDS"); do
      piece "$(gpu_of "$i")" "${files[i - 1]}" "$OUT/survey.shard$i.log" "$shared_s" --shard "$i/$SHARDS" \
        --per-gpu "$PER_GPU" --eval-timeout-s "$EVAL_TIMEOUT" &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do
      wait "$pid" || rc=$?
    done
  fi
  if [ "$PER_GPU" -gt 1 ]; then  # then the deferred problems, the GPU alone: GPUs at once, shards in turn
    pids=()
    for g in $(seq 0 $((SHARDS / PER_GPU - 1))); do
      (
        own=0
        for i in $(seq $((g * PER_GPU + 1)) $(((g + 1) * PER_GPU))); do
          left=$((BUDGET - SECONDS))
          if [ "$left" -ge 20 ] && grep -qs '"status": "deferred"' "${files[i - 1]}"; then
            piece "$(gpu_of "$i")" "${files[i - 1]}" "$OUT/survey.shard$i.solo.log" "$left" \
              --shard "$i/$SHARDS" --deferred-only --eval-timeout-s "$ALONE_TIMEOUT" || own=$?
          fi
        done
        exit $own
      ) &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do
      wait "$pid" || rc=$?
    done
  fi
fi
present=()
for f in "${files[@]}"; do
  [ -f "$f" ] && cp "$f" "$OUT/" && present+=("$f")
done
[ ${#present[@]} -gt 0 ] && python3 -m drkernel.cli suite table "${present[@]}" --markdown --out "$OUT/survey_table.md"
tail -n 2 "$OUT"/survey*.log
exit $rc
