#include "exec/exec_context.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace keel {

float *Workspace::floats(std::size_t n) {
  const std::size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  for (auto &c : chunks_) {
    if (c.size - c.used >= bytes) {
      std::byte *p = c.mem.get() + c.used;
      c.used += bytes;
      return reinterpret_cast<float *>(p);
    }
  }
  const std::size_t size = std::max<std::size_t>(bytes, std::size_t{1} << 20);
  Chunk c;
  // new std::byte[] is aligned to __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16); align by hand.
  c.mem.reset(new std::byte[size + 64]);
  c.size = size + 64;
  const auto addr = reinterpret_cast<std::uintptr_t>(c.mem.get());
  c.used = (64 - addr % 64) % 64 + bytes;
  std::byte *p = c.mem.get() + (c.used - bytes);
  chunks_.push_back(std::move(c));
  return reinterpret_cast<float *>(p);
}

void Workspace::reset() {
  if (chunks_.size() > 1) {
    // Merge into one chunk as large as the last pass needed, so the next pass fits.
    std::size_t total = 0;
    for (auto &c : chunks_) total += c.size;
    chunks_.clear();
    Chunk c;
    c.mem.reset(new std::byte[total]);
    c.size = total;
    chunks_.push_back(std::move(c));
  }
  for (auto &c : chunks_) {
    const auto addr = reinterpret_cast<std::uintptr_t>(c.mem.get());
    c.used = (64 - addr % 64) % 64;
  }
}

std::size_t Workspace::capacity_bytes() const {
  std::size_t total = 0;
  for (auto &c : chunks_) total += c.size;
  return total;
}

ExecContext::ExecContext(int threads) : pool_(threads) {}

}  // namespace keel
