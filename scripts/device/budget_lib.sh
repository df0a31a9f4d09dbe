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
