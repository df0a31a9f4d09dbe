#!/usr/bin/env bash
# Issue #32 on the GPU machine (the only one with torch + transformers): the tiny MLA
# reference models (deepseek_v3, glm_moe_dsa) and their float64 outputs
# (scripts/ref/mla_fixtures.py), made on the CPU. Needs no keel binary.
#
#   there:  bash scripts/device/mla_h200.sh   (leaves $OUT/mla_models.tar.gz)
#   then:   tar xzf mla_models.tar.gz -C tests/fixtures (the CPU tests in
#           tests/model/test_cpu_mla_fixtures.cpp skip each fixture until it is there)
set -uo pipefail
out=${OUT:-/tmp/keel-mla}
mkdir -p "$out"
start=$SECONDS
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
CUDA_VISIBLE_DEVICES="" OUT="$out/work" PYTHONUNBUFFERED=1 timeout 150 python3 scripts/ref/mla_fixtures.py \
  >"$out/mla_fixtures.log" 2>&1
echo "mla_fixtures exit $? after $((SECONDS - start)) s"
grep -E '^ok |attempt|^errors:|Error|error:' "$out/mla_fixtures.log" | tail -40
tail -5 "$out/mla_fixtures.log"
(cd "$out/work" && tar czf "$out/mla_models.tar.gz" mla_models) && du -sh "$out/mla_models.tar.gz"
