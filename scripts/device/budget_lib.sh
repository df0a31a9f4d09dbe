# Sourced by the scripts/device/*_h200.sh checks (not run alone): unpacks the carried
# binaries, points the test binary at its source path, and gives each step a timeout
# capped by what is left of the call's budget. Expects: carry (the carried folder), out
# (the log folder) and budget (seconds) set by the caller.
mkdir -p "$out"
[ -f "$carry/pack.tar.xz" ] && [ ! -d "$carry/bin" ] && (cd "$carry" && tar -xJf pack.tar.xz)
export LD_LIBRARY_PATH="$PWD/$carry/lib:${LD_LIBRARY_PATH:-}"
B=$carry/bin
# The test binary finds fixtures and models under the source path it was built from.
src_dir=$(strings "$B/keel_test_cuda" 2>/dev/null | grep -m1 -E '^/.*/main$' || echo /work/main)
[ -e "$src_dir" ] || { mkdir -p "$(dirname "$src_dir")" && ln -s "$PWD" "$src_dir"; }
start=$SECONDS
stamp() { echo "== [$((SECONDS - start)) s] $*"; }
# cap T: the smaller of T and the time left (at least 1 s)
cap() {
  local left=$((budget - (SECONDS - start)))
  [ "$left" -lt 1 ] && left=1
  echo $(($1 < left ? $1 : left))
}
# summary LOG [N]: the gtest verdict lines of LOG
summary() { grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|^\[  FAILED' "$1" | tail -${2:-25}; }
# sanitize TOOL FILTER SECONDS: compute-sanitizer TOOL (memcheck or racecheck) on the CUDA
# tests FILTER names, at most SECONDS; log in $out/TOOL.log.
sanitize() {
  local tool=$1 filter=$2 secs=$3 extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check no)
  stamp "$tool: $filter"
  timeout "$(cap "$secs")" compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 9 \
    "$B/keel_test_cuda" --gtest_filter="$filter" >"$out/$tool.log" 2>&1
  echo "$tool exit $? (9: errors or hazards, 124: timed out)"
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" | sort | uniq -c
  summary "$out/$tool.log" 4
}
# Background servers a script starts (serve_one adds to it) are stopped when it exits.
pids=()
stop_servers() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap stop_servers EXIT
# serve_one LABEL STREAMS GGUF [VAR=VALUE ...]: `keel serve --device cuda GGUF` with those
# environment assignments, STREAMS concurrent streams of 512 in / 128 out (2 requests a stream
# after a warm-up wave) by serve_load.py, then the server stopped. Logs: $r/serve_LABEL.log (the
# server), $r/served_LABEL.log (the load). Expects r (log folder) set; ports from SERVE_PORT
# (default 18600) up.
up() { python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null; }
serve_one() {
  local label=$1 streams=$2 g=$3
  shift 3
  SERVE_PORT=$((${SERVE_PORT:-18600} + 1))
  local port=$SERVE_PORT
  env "$@" "$B/keel" serve --device cuda --port $port "$g" >"$r/serve_$label.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  for _ in $(seq 1 600); do up "http://127.0.0.1:$port/health" && break; sleep 0.2; done
  local id
  id=$(basename "$g" .gguf)
  stamp "served $id ($label): $streams streams, 512 in / 128 out"
  timeout "$(cap 120)" python3 "$(dirname "${BASH_SOURCE[0]}")/serve_load.py" \
    "http://127.0.0.1:$port" "$id" --streams "$streams" --input 512 --output 128 \
    --requests $((streams * 2)) --vocab 128000 --warmup | tee "$r/served_$label.log" | head -6
  grep -iE 'weights|quantized' "$r/serve_$label.log" | head -2
  kill $pid
  wait $pid 2>/dev/null
}
