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
