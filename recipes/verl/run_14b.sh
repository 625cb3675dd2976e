#!/usr/bin/env bash
# Dr. Kernel-14B RL on verl (docs/paper_spec.md §9.3).
# Usage: MODEL=... TRAIN=... VAL=... JUDGE_URL=... bash run_14b.sh
RECIPE=dr_kernel_14b source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
