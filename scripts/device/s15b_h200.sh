#!/usr/bin/env bash
# Session 15's second device call (issue 29 / 30): the quantized GEMV's tests and its
# microbench (k_qgemv by format, M and grid cap), 8B Q4_K_M decode with this tree's
# binaries and with the binaries before the change (same machine), and the bf16 verify
# step with the GEMV / fused GEMV taking up to 4 rows.
#   here:  KEEL_DEVCARRY=.devcarry-s15 scripts/device/package.sh build-cuda tests/keel_test_cuda \
#            bench/cuda_bench bench/cuda_qgemv_bench  (and the previous pack as .devcarry-s15old)
#   there: (carry .devcarry-s15 .devcarry-s15old) bash scripts/device/s15b_h200.sh
set -uo pipefail
carry=.devcarry-s15; out=${OUT:-/tmp/o}; budget=420
source scripts/device/budget_lib.sh
(cd .devcarry-s15old && mkdir -p x && tar -xJf pack.tar.xz -C x)
OLD=.devcarry-s15old/x/bin
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
stamp "qgemv tests"
timeout "$(cap 90)" "$B/keel_test_cuda" --gtest_filter='*Qgemv*:*Quantized*:*Gguf*:*LowBit*' >"$out/qt.log" 2>&1; echo "exit $?"
summary "$out/qt.log" 8
stamp "qgemv bench"
timeout "$(cap 120)" "$B/cuda_qgemv_bench" --formats q4_k,q6_k,q8_0 --m 1,2,4,8 --waves 0 >"$out/qb.log" 2>&1; echo "exit $?"
cat "$out/qb.log"
stamp "q4_k_m decode new / old"
timeout "$(cap 90)" "$B/cuda_bench" --model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --no-long-prefill --decode-steps 32 --seqs 1,4,8 >"$out/q4new.log" 2>&1; echo "exit $?"
LD_LIBRARY_PATH=.devcarry-s15old/x/lib:$LD_LIBRARY_PATH timeout "$(cap 60)" "$OLD/cuda_bench" --model 8b --weights /tmp/q4km.gguf --no-long-prefill --decode-steps 32 --seqs 1,4,8 >"$out/q4old.log" 2>&1; echo "exit $?"
grep -E '^\| 8b' "$out/q4new.log" "$out/q4old.log"
stamp "verify with wider GEMV"

timeout "$(cap 60)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 32 --seqs 1 --verify 3 >"$out/v0.log" 2>&1; echo "exit $?"
grep -E '^\| 8b' "$out/v4.log" "$out/v0.log" | grep -E 'decode|verify'
stamp done
stamp "all"
timeout "$(cap 200)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 12
