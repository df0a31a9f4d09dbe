// Helpers for the cache-tier tests: a temporary directory, block payloads that name
// their own hash (so any wrong block served is caught), and an in-memory KvBlockStore.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kv/block_store.h"
#include "kv/block_hash.h"

namespace keel::test {

class TempDir {
 public:
  explicit TempDir(const std::string &tag = "keel-kv") {
    const char *base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/" + tag + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path &path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline BlockHash test_hash(std::uint64_t i) {
  return BlockHash{0x1234 + i * 0x9e3779b97f4a7c15ULL, i};
}

// Bytes that depend on the hash only: a block read back under another name differs.
inline void fill_payload(const BlockHash &h, std::byte *out, std::size_t n) {
  std::uint64_t x = h.lo ^ (h.hi * 0xff51afd7ed558ccdULL);
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out[i] = static_cast<std::byte>(x >> 56);
  }
}
inline std::vector<std::byte> payload_of(const BlockHash &h, std::size_t n) {
  std::vector<std::byte> v(n);
  fill_payload(h, v.data(), n);
  return v;
}

inline bool eventually_true(const std::function<bool()> &f,
                            std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return f();
}

// Device blocks in host memory; transfers run synchronously (the KvBlockStore defaults).
class MemKv final : public KvBlockStore {
 public:
  MemKv(std::int32_t blocks, std::int32_t bs, std::size_t bytes)
      : blocks_(blocks), bs_(bs), bytes_(bytes), data_(blocks * bytes) {}
  std::int32_t num_blocks() const override { return blocks_; }
  std::int32_t block_size() const override { return bs_; }
  std::size_t block_bytes() const override { return bytes_; }
  void copy_block(std::int32_t s, std::int32_t d) override {
    std::memcpy(block(d), block(s), bytes_);
  }
  void save_block(std::int32_t b, std::span<std::byte> out) override {
    std::memcpy(out.data(), block(b), bytes_);
    ++saves;
  }
  void load_block(std::int32_t b, std::span<const std::byte> in) override {
    std::memcpy(block(b), in.data(), bytes_);
    ++loads;
  }
  TransferId begin_save(std::span<const std::int32_t> blocks, std::span<std::byte> host) override {
    ++save_calls;
    return KvBlockStore::begin_save(blocks, host);
  }
  TransferId begin_load(std::span<const std::int32_t> blocks,
                        std::span<const std::byte> host) override {
    ++load_calls;
    return KvBlockStore::begin_load(blocks, host);
  }
  std::byte *block(std::int32_t b) { return data_.data() + static_cast<std::size_t>(b) * bytes_; }
  int saves = 0, loads = 0, save_calls = 0, load_calls = 0;

 private:
  std::int32_t blocks_, bs_;
  std::size_t bytes_;
  std::vector<std::byte> data_;
};

}  // namespace keel::test
