#!/usr/bin/env bash
# The device tool sends the working tree (tracked and untracked-not-ignored files) plus the
# carried paths, 64 MiB in all. Tests and benches on the device need none of these (they are
# CPU-side fixtures, the fuzz corpus, the journal), so move them aside before a call and back
# right after it:
#   scripts/device/slim_tree.sh out   # prints the tree's MiB without the carry
#   ... run(...) ...
#   scripts/device/slim_tree.sh in
# While they are out the checkout looks modified: commit nothing, and helpers cannot merge.
# (CudaVsTransformers reports itself uninstantiated on the device without tests/fixtures/models;
# tests/fixtures/mtp stays: the CUDA MTP layer tests read it.)
set -euo pipefail
cd "$(dirname "$0")/../.."
hold=${KEEL_SLIM_HOLD:-/tmp/keel-slim-hold}
paths=(tests/fuzz/corpus tests/fixtures/maskbench tests/fixtures/tokenizer tests/fixtures/templates
       tests/fixtures/models tests/fixtures/moe_models models/default/draft
       bench/RESULTS.md)
case "${1:-}" in
  out)
    for p in "${paths[@]}"; do
      [ -e "$p" ] || continue
      mkdir -p "$hold/$(dirname "$p")"
      mv "$p" "$hold/$p"
    done
    (git ls-files -z; git ls-files -z --others --exclude-standard) |
      { xargs -0 -r stat -c %s 2>/dev/null || true; } |  # the moved files are gone: no stat
      awk '{s += $1} END {printf "%.1f MiB\n", s / 1048576}'
    ;;
  in)
    for p in "${paths[@]}"; do
      [ -e "$hold/$p" ] || continue
      mkdir -p "$(dirname "$p")"
      mv "$hold/$p" "$p"
    done
    git status --short | head -5
    ;;
  *)
    echo "usage: $0 out|in" >&2
    exit 2
    ;;
esac
