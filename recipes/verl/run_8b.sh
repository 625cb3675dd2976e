#!/usr/bin/env bash
# Dr. Kernel-8B RL on verl (docs/paper_spec.md §9.3).
# Usage: MODEL=... TRAIN=... VAL=... JUDGE_URL=... bash run_8b.sh
RECIPE=dr_kernel_8b source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
