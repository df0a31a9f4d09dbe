// The download cache, one folder per repository:
//   ROOT/ORG--NAME/refs/REVISION          the commit a revision resolved to (escaped name)
//   ROOT/ORG--NAME/snapshots/COMMIT/...   verified files only, under their repository names
//   ROOT/ORG--NAME/snapshots/COMMIT/.keel-manifest.json   what is there and which
//                                          selections are whole (written atomically)
//   ROOT/ORG--NAME/partial/COMMIT/NAME.part   downloads in progress (resumable)
// keel creates no symlinks in the cache, so a path under ROOT that passes through one
// was planted: every path the cache hands out or writes is checked, and one through a
// symlink is refused (Error kInvalidArgument naming it) rather than followed. Names whose
// part starts with ".keel-" are the cache's own (the manifest and its temporary file): a
// repository file so named is never fetched, so it cannot overwrite the manifest.
// A file enters snapshots/ only after its size and hash matched the hub's, and a
// selection (the model's files, or one named file) counts as present only once every
// file of it did: a half-downloaded model is never handed to a loader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace keel::hub {

struct CachedFile {
  std::string name;
  std::uint64_t size = 0;
  std::string digest;  // "sha256:..." or "git-sha1:..."; empty when the hub gave none
};

class HubCache {
 public:
  explicit HubCache(std::filesystem::path root);

  const std::filesystem::path &root() const { return root_; }
  std::filesystem::path repo_dir(const std::string &repo) const;
  std::filesystem::path snapshot_dir(const std::string &repo, const std::string &commit) const;
  std::filesystem::path partial_path(const std::string &repo, const std::string &commit,
                                     const std::string &file) const;
  // Where a verified file of a snapshot lives (checked like the others).
  std::filesystem::path snapshot_file(const std::string &repo, const std::string &commit,
                                      const std::string &file) const;
  // Throws Error(kInvalidArgument) when a part of `p` below the root is a symlink.
  void refuse_symlinks(const std::filesystem::path &p) const;

  std::optional<std::string> ref_commit(const std::string &repo, const std::string &revision) const;
  void write_ref(const std::string &repo, const std::string &revision, const std::string &commit);

  // True when `file` is in the snapshot's manifest (it was verified when it entered).
  bool has_file(const std::string &repo, const std::string &commit, const std::string &file) const;
  // Records a verified file that was just moved into the snapshot.
  void add_file(const std::string &repo, const std::string &commit, const CachedFile &f);
  // Records that `files` make a whole selection: the model (`model` true) or one file.
  void mark_complete(const std::string &repo, const std::string &commit,
                     const std::vector<std::string> &files, bool model);
  // The whole model selection of a snapshot, when one was completed.
  bool model_complete(const std::string &repo, const std::string &commit) const;

 private:
  std::filesystem::path manifest_path(const std::string &repo, const std::string &commit) const;
  std::filesystem::path root_;
};

// True when a part of the repository file name `rel` is reserved for the cache's own
// files (starts with ".keel-"): such a file is never fetched.
bool is_reserved_cache_name(std::string_view rel);

// $KEEL_HUB_CACHE, else $XDG_CACHE_HOME/keel/hub, else $HOME/.cache/keel/hub.
std::filesystem::path default_hub_cache();

}  // namespace keel::hub
