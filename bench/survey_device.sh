#!/usr/bin/env bash
# Issue 36: `drkernel suite survey` over KernelBench levels 1-3 on the GPU machine, one piece per
# 10-minute device call. The device has no network: KernelBench travels as a packed tree.
#
# Once, on the development machine (network; nothing of KernelBench is committed, .kb/ is ignored):
#   git clone https://github.com/ScalingIntelligence/KernelBench /tmp/KernelBench
#   mkdir -p .kb && git -C /tmp/KernelBench archive 423217d9 KernelBench/level1 KernelBench/level2 \
#       KernelBench/level3 | tar -x -C .kb        # the commit of docs/audit_kernelbench.md
#   mkdir -p .survey                              # the file of record lives here between calls (ignored)
# Each device call (the `run` tool, carry [".kb", ".survey"]), from the repository root:
#   bash bench/survey_device.sh
# then copy $OUT/kernelbench_h200.json back over .survey/kernelbench_h200.json, and call again until
# the last line says "0 left". Rows already in the file are skipped (--resume); the file is rewritten
# after every problem, so a call cut off loses at most the problem it was on.
# Knobs (environment): LEVELS (1-3), SHARD (e.g. 1/2, with SURVEY naming a file per shard), BUDGET
# (seconds of survey work a call starts, default 480 of the call's 600), EXTRA (more flags, e.g.
# "--no-compile" or "--nulls zeros,constant,replay"), OUT (where the file and the log go back).
set -u
OUT=${OUT:-gpu-out}
KB=${KB:-.kb}
SURVEY=${SURVEY:-.survey/kernelbench_h200.json}
mkdir -p "$OUT" "$(dirname "$SURVEY")"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ ! -d "$KB/KernelBench/level1" ] && [ ! -d "$KB/level1" ]; then
  echo "survey_device.sh: no KernelBench tree in $KB (pack it first, see the top of this file)" >&2
  exit 2
fi
nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
shard=()
[ -n "${SHARD:-}" ] && shard=(--shard "$SHARD")
# shellcheck disable=SC2086  # EXTRA is a list of flags
timeout 590 python3 -m drkernel.cli suite survey "kernelbench:$KB" --levels "${LEVELS:-1-3}" --device cuda \
  --out "$SURVEY" --resume --budget-s "${BUDGET:-480}" --probe-timeout-s 120 --eval-timeout-s 120 \
  "${shard[@]}" ${EXTRA:-} > "$OUT/survey.log" 2>&1
rc=$?
cp "$SURVEY" "$OUT/" 2>/dev/null
python3 -m drkernel.cli suite table "$SURVEY" --markdown --out "$OUT/survey_table.md" >> "$OUT/survey.log" 2>&1
tail -n 5 "$OUT/survey.log"
exit $rc
