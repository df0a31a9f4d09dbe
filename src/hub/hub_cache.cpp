#include "hub/hub_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "hub/http_fetch.h"
#include "hub/hub_spec.h"

namespace keel::hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char *kManifest = ".keel-manifest.json";

json read_json(const fs::path &p) {
  std::ifstream in(p);
  if (!in) return json::object();
  try {
    return json::parse(in);
  } catch (const json::exception &) {
    // A manifest that does not parse is treated as empty: its files are fetched again.
    return json::object();
  }
}

// Writes through a temporary file, fsync and rename: a crash leaves the old or the new
// text, never a torn one.
void write_atomic(const fs::path &p, const std::string &text) {
  fs::create_directories(p.parent_path());
  const fs::path tmp = p.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(ErrorCode::kResourceExhausted, "cannot write " + tmp.string());
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n <= 0) {
      ::close(fd);
      fs::remove(tmp);
      throw Error(ErrorCode::kResourceExhausted, "cannot write " + tmp.string() + " (disk full?)");
    }
    off += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  fs::rename(tmp, p);
}

}  // namespace

HubCache::HubCache(fs::path root) : root_(std::move(root)) {}

fs::path HubCache::manifest_path(const std::string &repo, const std::string &commit) const {
  const fs::path p = snapshot_dir(repo, commit) / kManifest;
  refuse_symlinks(p);
  refuse_symlinks(p.string() + ".tmp");
  return p;
}

fs::path HubCache::repo_dir(const std::string &repo) const {
  fs::path p = root_ / repo_folder(repo);
  refuse_symlinks(p);
  return p;
}

fs::path HubCache::snapshot_dir(const std::string &repo, const std::string &commit) const {
  fs::path p = repo_dir(repo) / "snapshots" / commit;
  refuse_symlinks(p);
  return p;
}

fs::path HubCache::snapshot_file(const std::string &repo, const std::string &commit,
                                 const std::string &file) const {
  fs::path p = snapshot_dir(repo, commit) / file;
  refuse_symlinks(p);
  return p;
}

fs::path HubCache::partial_path(const std::string &repo, const std::string &commit,
                                const std::string &file) const {
  fs::path p = repo_dir(repo) / "partial" / commit / (file + ".part");
  refuse_symlinks(p);
  return p;
}

void HubCache::refuse_symlinks(const fs::path &p) const {
  const fs::path rel = p.lexically_relative(root_);
  if (rel.empty() || *rel.begin() == "..")
    throw Error(ErrorCode::kInvalidArgument,
                "hub cache: " + p.string() + " is outside the cache " + root_.string());
  fs::path at = root_;
  for (const auto &part : rel) {
    at /= part;
    std::error_code ec;
    const auto st = fs::symlink_status(at, ec);
    if (ec || st.type() == fs::file_type::not_found) return;  // nothing further exists
    if (st.type() == fs::file_type::symlink)
      throw Error(ErrorCode::kInvalidArgument,
                  "hub cache: " + at.string() +
                      " is a symlink that keel did not create; it is not followed (remove it)");
  }
}

bool is_reserved_cache_name(std::string_view rel) {
  std::size_t start = 0;
  while (start <= rel.size()) {
    const std::size_t end = std::min(rel.find('/', start), rel.size());
    if (rel.substr(start, end - start).substr(0, 6) == ".keel-") return true;
    start = end + 1;
  }
  return false;
}

std::optional<std::string> HubCache::ref_commit(const std::string &repo,
                                                const std::string &revision) const {
  const fs::path ref = repo_dir(repo) / "refs" / url_escape_segment(revision);
  refuse_symlinks(ref);
  std::ifstream in(ref);
  std::string commit;
  if (!(in >> commit) || !is_safe_relative_path(commit) || commit.find('/') != std::string::npos)
    return std::nullopt;
  return commit;
}

void HubCache::write_ref(const std::string &repo, const std::string &revision,
                         const std::string &commit) {
  const fs::path ref = repo_dir(repo) / "refs" / url_escape_segment(revision);
  refuse_symlinks(ref);
  refuse_symlinks(ref.string() + ".tmp");
  write_atomic(ref, commit + "\n");
}

bool HubCache::has_file(const std::string &repo, const std::string &commit,
                        const std::string &file) const {
  const fs::path dir = snapshot_dir(repo, commit);
  refuse_symlinks(dir / kManifest);
  const json m = read_json(dir / kManifest);
  if (!m.contains("files") || !m["files"].contains(file)) return false;
  std::error_code ec;
  const auto size = fs::file_size(snapshot_file(repo, commit, file), ec);
  return !ec && size == m["files"][file].value("size", std::uint64_t{0});
}

void HubCache::add_file(const std::string &repo, const std::string &commit, const CachedFile &f) {
  const fs::path p = manifest_path(repo, commit);
  json m = read_json(p);
  m["files"][f.name] = {{"size", f.size}, {"digest", f.digest}};
  write_atomic(p, m.dump(1));
}

void HubCache::mark_complete(const std::string &repo, const std::string &commit,
                             const std::vector<std::string> &files, bool model) {
  const fs::path p = manifest_path(repo, commit);
  json m = read_json(p);
  for (const auto &f : files)
    if (!m.contains("files") || !m["files"].contains(f))
      throw Error(ErrorCode::kInternal, "hub cache: " + f + " is not in the manifest");
  if (model) m["model_files"] = files;
  write_atomic(p, m.dump(1));
}

bool HubCache::model_complete(const std::string &repo, const std::string &commit) const {
  const json m = read_json(manifest_path(repo, commit));
  if (!m.contains("model_files") || !m["model_files"].is_array()) return false;
  for (const auto &f : m["model_files"])
    if (!f.is_string() || !has_file(repo, commit, f.get<std::string>())) return false;
  return true;
}

fs::path default_hub_cache() {
  if (const char *p = std::getenv("KEEL_HUB_CACHE"); p && *p) return p;
  if (const char *p = std::getenv("XDG_CACHE_HOME"); p && *p) return fs::path(p) / "keel" / "hub";
  if (const char *p = std::getenv("HOME"); p && *p) return fs::path(p) / ".cache" / "keel" / "hub";
  return fs::path(".keel-hub-cache");
}

}  // namespace keel::hub
