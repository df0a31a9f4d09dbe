#!/usr/bin/env bash
# CPU decode/prefill benchmark on 1B-shaped (Llama 3.2 1B) random models in f16, q8_0,
# q4_0 and q4_k GGUF, each against rooflines measured in the same process (see cpu_bench.cpp).
#   bench/cpu_bench.sh [BUILD_DIR] [MODEL_DIR]
set -euo pipefail
build=${1:-build}
models=${2:-/tmp/keel_bench}
mkdir -p "$models"
for d in f16 q8_0 q4_0 q4_k; do
  f="$models/llama1b_$d.gguf"
  [ -f "$f" ] || "$build/keel" make-model --shape 1b --dtype "$d" --format gguf --seed 1 --out "$f"
done
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for d in f16 q8_0 q4_0 q4_k; do
  "$build/bench/cpu_bench" --model "$models/llama1b_$d.gguf" --prompt 512 --decode 16
done
