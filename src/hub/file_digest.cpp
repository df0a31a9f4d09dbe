#include "hub/file_digest.h"

#include <openssl/evp.h>

#include <cstdio>
#include <vector>

#include "core/error.h"

namespace keel::hub {

struct FileDigest::Impl {
  EVP_MD_CTX *ctx = nullptr;
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

FileDigest::FileDigest(DigestKind kind, std::uint64_t size) : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  const EVP_MD *md = kind == DigestKind::kSha256 ? EVP_sha256() : EVP_sha1();
  if (!impl_->ctx || EVP_DigestInit_ex(impl_->ctx, md, nullptr) != 1)
    throw Error(ErrorCode::kInternal, "OpenSSL: digest init failed");
  if (kind == DigestKind::kGitBlobSha1) {
    const std::string header = "blob " + std::to_string(size);
    update(header.data(), header.size() + 1);  // with its terminating NUL
  }
}

FileDigest::~FileDigest() = default;

void FileDigest::update(const void *data, std::size_t n) {
  if (EVP_DigestUpdate(impl_->ctx, data, n) != 1)
    throw Error(ErrorCode::kInternal, "OpenSSL: digest update failed");
}

std::string FileDigest::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(impl_->ctx, md, &len) != 1)
    throw Error(ErrorCode::kInternal, "OpenSSL: digest final failed");
  static const char *digits = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += digits[md[i] >> 4];
    out += digits[md[i] & 15];
  }
  return out;
}

std::string digest_file(const std::filesystem::path &path, DigestKind kind, std::uint64_t size) {
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(ErrorCode::kNotFound, "cannot read " + path.string());
  FileDigest d(kind, size);
  std::vector<char> buf(1 << 20);
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) d.update(buf.data(), n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) throw Error(ErrorCode::kFormat, "read error in " + path.string());
  return d.hex();
}

}  // namespace keel::hub
