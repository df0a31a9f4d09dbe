#!/usr/bin/env bash
# Runs the README's test command N times on a clean clone and writes a summary: the flake
# hunt of issue 33. Each run is `CI=true bash scripts/test` in a fresh clone of HEAD
# (committed work only), built once with cmake + ccache.
#   scripts/dev/repeat_tests.sh N [--load K] [--out DIR] [--cuda]
# The clone builds without CUDA (as on a fresh Debian 12 machine, which has no nvcc);
# --cuda configures as CI does (sm_90 only, where nvcc exists).
# --load K runs K busy loops beside the tests (a loaded machine, as the issue asks).
# KEEL_TESTDATA is passed through; tests/npm/node_modules is linked from this checkout.
# The summary (DIR/summary.txt) has one line per run: pass/fail, tests passed of total,
# seconds, and the failed tests' names; each run's full log is DIR/run-K.log.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
n="${1:?usage: repeat_tests.sh N [--load K] [--out DIR]}"
shift
load=0
cuda=(-DKEEL_CUDA=OFF)
out="/tmp/keel-repeat-$(date +%Y%m%d-%H%M%S)"
while [ $# -gt 0 ]; do
  case "$1" in
    --load) load="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --cuda) cuda=(-DKEEL_CUDA_ARCHS=90); shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
clone="$out/clone"
rev="$(git -C "$here" rev-parse HEAD)"
git clone -q --no-hardlinks "$here" "$clone"
git -C "$clone" checkout -q "$rev"
modules="$(realpath "$here/tests/npm/node_modules" 2>/dev/null || true)"
if [ -n "$modules" ] && [ -d "$modules" ]; then
  rm -rf "$clone/tests/npm/node_modules"
  ln -s "$modules" "$clone/tests/npm/node_modules"
fi
echo "clone of $rev at $clone" | tee "$out/summary.txt"
t0=$(date +%s)
(cd "$clone" && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKEEL_NATIVE=OFF "${cuda[@]}" \
   -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache >"$out/build.log" 2>&1 &&
 nice -n 10 cmake --build build -j2 >>"$out/build.log" 2>&1) ||
  { echo "build failed: $out/build.log" | tee -a "$out/summary.txt"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s" | tee -a "$out/summary.txt"

loaders=()
stop_load() { for p in "${loaders[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_load EXIT
for _ in $(seq 1 "$load"); do
  (while :; do :; done) &
  loaders+=($!)
done
[ "$load" -gt 0 ] && echo "load: $load busy loops" | tee -a "$out/summary.txt"

passes=0
for k in $(seq 1 "$n"); do
  t=$(date +%s)
  rc=0
  (cd "$clone" && CI=true bash scripts/test) >"$out/run-$k.log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - t ))
  # `|| true`: no match (a run with no failures) must not end the script under set -e.
  counts="$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$out/run-$k.log" | tail -1 || true)"
  failed="$(sed -n '/The following tests FAILED/,$p' "$out/run-$k.log" | grep -E '^\s+[0-9]+ - ' |
            sed -E 's/^\s+[0-9]+ - //' | tr '\n' ';' || true)"
  if [ $rc -eq 0 ]; then passes=$((passes + 1)); verdict=pass; else verdict=FAIL; fi
  # The machine's load over the run: the 15-minute load average at its end.
  load15="$(cut -d' ' -f3 /proc/loadavg)"
  echo "run $k: $verdict ($counts) ${secs} s, load15 $load15 ${failed:+failed: $failed}" | tee -a "$out/summary.txt"
done
echo "$passes of $n runs passed" | tee -a "$out/summary.txt"
[ "$passes" -eq "$n" ]
