#!/usr/bin/env bash
# Issue #19 on the GPU machine (the only one with torch + transformers): the tiny MoE
# reference models and their float64 outputs (scripts/ref/moe_fixtures.py: qwen3_moe,
# mixtral, glm4_moe, gpt_oss), made on the CPU. Needs no keel binary; about 30-60 s.
#
#   there:  bash scripts/device/moecpu_h200.sh
#   then:   copy $OUT/moe_models to tests/fixtures/moe_models (the CPU tests in
#           tests/model/test_cpu_moe_fixtures.cpp skip each fixture until it is there)
set -uo pipefail
out=${OUT:-/tmp/keel-moecpu}
mkdir -p "$out"
start=$SECONDS
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
# No GPU: the reference must not touch a TF32 or reduced-precision path.
CUDA_VISIBLE_DEVICES="" OUT="$out" timeout 75 python3 scripts/ref/moe_fixtures.py \
  >"$out/moe_fixtures.log" 2>&1
echo "moe_fixtures exit $? after $((SECONDS - start)) s"
grep -E '^ok |^errors:|Error|error:' "$out/moe_fixtures.log" | tail -30
du -sh "$out/moe_models" 2>/dev/null
ls "$out/moe_models" 2>/dev/null
