#!/usr/bin/env bash
# Packs binaries built here (Debian 12) for the GPU machine (Ubuntu 24.04, CUDA 13 with
# cuBLAS): stripped binaries plus the shared libraries they need that are neither part of
# glibc/libstdc++ nor CUDA (present there), into .devcarry/ (git-ignored). Pass
# `.devcarry` in the run tool's `carry` and run with LD_LIBRARY_PATH=.devcarry/lib.
#
#   scripts/device/package.sh [build-dir] [binary...]
set -euo pipefail
build=${1:-build-cuda}
shift || true
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  bins=(tests/keel_test_cuda bench/cuda_bench keel)
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/${KEEL_DEVCARRY:-.devcarry}"  # KEEL_DEVCARRY: another folder, so two packers do not collide
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
# Libraries the device image provides itself.
system_re='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcublasLt|libnvidia)'
for b in "${bins[@]}"; do
  src="$root/$build/$b"
  if [ ! -x "$src" ]; then
    echo "package: skipping $b (not built)" >&2
    continue
  fi
  cp "$src" "$out/bin/"
  strip --strip-unneeded "$out/bin/$(basename "$b")"
  ldd "$src" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if [[ ! $name =~ $system_re ]] && [ ! -e "$out/lib/$name" ]; then
      cp -L "$path" "$out/lib/$name"
      strip --strip-unneeded "$out/lib/$name" 2>/dev/null || true
    fi
  done
done
# Tests look for their source tree relative to the working directory, not this path.
du -sh "$out"
ls -l "$out/bin" "$out/lib"
