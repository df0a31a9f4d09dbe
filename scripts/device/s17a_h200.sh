#!/usr/bin/env bash
# Session 17, call A: a draft model on the CUDA runner (ModelRunner::open_sibling) keeps
# greedy output (the default model drafting for itself), then the draft for the default
# model trained (scripts/default_model/train_draft.py, distilled from it), then the CUDA
# speculative tests again with the trained draft in models/default/draft.
set -uo pipefail
carry=.devcarry-s17; out=${OUT:-/tmp/o}; budget=${BUDGET:-560}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "speculative tests (draft = the default model itself)"
timeout "$(cap 90)" "$B/keel_test_cuda" --gtest_filter='CudaEngineSpeculative.*' >"$out/spec.log" 2>&1
echo "exit $?"; grep -E '^\[ spec \]' "$out/spec.log" | head -12; summary "$out/spec.log" 6
stamp "train the draft"
timeout "$(cap 360)" python3 scripts/default_model/train_draft.py \
  --train .devcarry-data/default_model/train.txt.xz --teacher models/default --out "$out/draft" \
  --train-seconds 150 --deadline-seconds 330 >"$out/train.log" 2>&1
echo "exit $?"; tail -n 30 "$out/train.log"
if [ -f "$out/draft/model.safetensors" ]; then
  cp -r "$out/draft" models/default/draft
  stamp "speculative tests with the trained draft"
  timeout "$(cap 90)" "$B/keel_test_cuda" --gtest_filter='CudaEngineSpeculative.DraftModel*' >"$out/spec2.log" 2>&1
  echo "exit $?"; grep -E '^\[ spec \]' "$out/spec2.log" | head -12; summary "$out/spec2.log" 6
fi
stamp done
