#!/usr/bin/env bash
# Session 20 (issue 30): an EAGLE-3 head for the default model, trained on the GPU by
# scripts/default_model/train_eagle3.py (150 s of training; the script ends by 270 s) into
# $OUT/eagle3 (model.safetensors, config.json, README.md, acceptance.json, train_eagle3.json;
# ship it as models/default/eagle3), then its acceptance.json. Needs no keel binary, only the
# training text made by scripts/default_model/prepare_data.py, carried:
#   run(carry=[".devcarry-data/default_model/train.txt.xz"], command="bash scripts/device/s20_eagle3.sh")
# Arguments go to the script (a cheaper head: --draft-vocab 1024 --ffn 768).
set -uo pipefail
out=${OUT:-/tmp/o}; mkdir -p "$out"
start=$SECONDS
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c 'import torch, tokenizers; print("torch", torch.__version__, "tokenizers", tokenizers.__version__)'
timeout 290 python3 scripts/default_model/train_eagle3.py \
  --train .devcarry-data/default_model/train.txt.xz --teacher models/default --out "$out/eagle3" \
  --train-seconds 150 --deadline-seconds 270 "$@" >"$out/train_eagle3.log" 2>&1
echo "exit $? after $((SECONDS - start)) s"
grep -vE '^[ {}]' "$out/train_eagle3.log" | cut -c1-400 | tail -n 40  # the log without the JSON
cat "$out/eagle3/acceptance.json"
