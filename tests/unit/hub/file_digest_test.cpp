#include "hub/file_digest.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace keel::hub {
namespace {

std::string digest_of(DigestKind kind, const std::string &text) {
  FileDigest d(kind, text.size());
  d.update(text.data(), text.size());
  return d.hex();
}

TEST(FileDigest, Sha256KnownVectors) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(digest_of(DigestKind::kSha256, "abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest_of(DigestKind::kSha256, ""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(FileDigest, GitBlobIdMatchesGit) {
  // `printf 'hello\n' | git hash-object --stdin` and the empty blob's well-known id.
  EXPECT_EQ(digest_of(DigestKind::kGitBlobSha1, "hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a");
  EXPECT_EQ(digest_of(DigestKind::kGitBlobSha1, ""), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
}

TEST(FileDigest, WholeFileEqualsStreamedPieces) {
  const auto p = std::filesystem::temp_directory_path() / "keel_digest_test.bin";
  std::string data;
  for (int i = 0; i < 3'000'000; ++i) data += static_cast<char>(i * 31 + 7);
  std::ofstream(p, std::ios::binary) << data;
  FileDigest pieces(DigestKind::kSha256, data.size());
  for (std::size_t off = 0; off < data.size(); off += 65'537)
    pieces.update(data.data() + off, std::min<std::size_t>(65'537, data.size() - off));
  EXPECT_EQ(digest_file(p, DigestKind::kSha256, data.size()), pieces.hex());
  std::filesystem::remove(p);
}

}  // namespace
}  // namespace keel::hub
