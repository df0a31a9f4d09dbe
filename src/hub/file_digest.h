// Streaming digests a download is checked against: SHA-256 (the hub's LFS files) and
// the git blob id (SHA-1 of "blob <size>\0" + content: small files kept in git).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace keel::hub {

enum class DigestKind { kSha256, kGitBlobSha1 };

class FileDigest {
 public:
  // `size` is needed up front by the git blob header.
  FileDigest(DigestKind kind, std::uint64_t size);
  ~FileDigest();
  FileDigest(const FileDigest &) = delete;
  FileDigest &operator=(const FileDigest &) = delete;

  void update(const void *data, std::size_t n);
  std::string hex();  // finishes the digest: lowercase hex

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The digest of a whole file on disk (throws Error naming the file when it cannot read it).
std::string digest_file(const std::filesystem::path &path, DigestKind kind, std::uint64_t size);

}  // namespace keel::hub
