// The hub cache refuses what it did not make (issue 31, item 6): a symlink planted
// anywhere under its root is not followed, and the cache's own file names are reserved.
#include "hub/hub_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace fs = std::filesystem;
using keel::Error;
using keel::hub::CachedFile;
using keel::hub::HubCache;
using keel::hub::is_reserved_cache_name;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/keel-hub-cache-test.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

constexpr const char *kCommit = "0123456789abcdef0123456789abcdef01234567";

}  // namespace

TEST(HubCache, WritesAndReadsItsOwnFiles) {
  TempDir t;
  HubCache cache(t.path / "hub");
  cache.write_ref("org/name", "main", kCommit);
  EXPECT_EQ(cache.ref_commit("org/name", "main"), kCommit);
  const fs::path f = cache.snapshot_file("org/name", kCommit, "config.json");
  fs::create_directories(f.parent_path());
  std::ofstream(f) << "{}";
  cache.add_file("org/name", kCommit, CachedFile{"config.json", 2, ""});
  EXPECT_TRUE(cache.has_file("org/name", kCommit, "config.json"));
}

TEST(HubCache, RefusesAPlantedSymlinkAnywhereBelowTheRoot) {
  TempDir t;
  HubCache cache(t.path / "hub");
  const fs::path outside = t.path / "outside";
  fs::create_directories(outside);
  // The snapshot folder is a link to a folder outside the cache.
  const fs::path snaps = t.path / "hub" / "org--name" / "snapshots";
  fs::create_directories(snaps);
  fs::create_directory_symlink(outside, snaps / kCommit);
  EXPECT_THROW(cache.snapshot_dir("org/name", kCommit), Error);
  EXPECT_THROW(cache.add_file("org/name", kCommit, CachedFile{"a", 1, ""}), Error);
  EXPECT_FALSE(fs::exists(outside / ".keel-manifest.json"));
  // A file link inside a real snapshot.
  fs::create_directories(snaps / "other");
  fs::create_symlink(outside / "secret", snaps / "other" / "model.safetensors");
  try {
    cache.snapshot_file("org/name", "other", "model.safetensors");
    FAIL() << "a planted file link was followed";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("symlink that keel did not create"), std::string::npos);
  }
  // The refs folder.
  fs::create_directory_symlink(outside, t.path / "hub" / "org--name" / "refs");
  EXPECT_THROW(cache.write_ref("org/name", "main", kCommit), Error);
  EXPECT_TRUE(fs::is_empty(outside));
  // A root that is itself a link (the user's choice) is fine.
  fs::create_directory_symlink(t.path / "hub2", t.path / "hub-link");
  HubCache linked(t.path / "hub-link");
  fs::create_directories(t.path / "hub2");
  EXPECT_NO_THROW(linked.write_ref("org/name", "main", kCommit));
}

TEST(HubCache, ReservesItsOwnNames) {
  EXPECT_TRUE(is_reserved_cache_name(".keel-manifest.json"));
  EXPECT_TRUE(is_reserved_cache_name(".keel-manifest.json.tmp"));
  EXPECT_TRUE(is_reserved_cache_name("sub/.keel-x"));
  EXPECT_FALSE(is_reserved_cache_name("model.safetensors"));
  EXPECT_FALSE(is_reserved_cache_name(".gitattributes"));
  EXPECT_FALSE(is_reserved_cache_name("keel-manifest.json"));
}
