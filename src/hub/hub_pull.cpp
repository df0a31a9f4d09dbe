#include "hub/hub_pull.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/bounded_json.h"
#include "core/error.h"
#include "hub/byte_progress.h"
#include "hub/file_digest.h"
#include "hub/hub_cache.h"

namespace keel::hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct RemoteFile {
  std::string name;
  std::uint64_t size = 0;
  std::string sha256;   // LFS files
  std::string blob_id;  // git files
};

std::string getenv_str(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

bool truthy(const std::string &v) { return v == "1" || v == "true" || v == "TRUE" || v == "yes"; }

// Files a model needs from a repository in the safetensors layout.
bool is_model_file(const std::string &name) {
  if (name.find('/') != std::string::npos) return false;  // top level only
  static const char *kNames[] = {"config.json",         "generation_config.json",
                                 "tokenizer.json",      "tokenizer_config.json",
                                 "tokenizer.model",     "special_tokens_map.json",
                                 "chat_template.jinja", "chat_template.json",
                                 "vocab.json",          "merges.txt",
                                 "added_tokens.json"};
  for (const char *n : kNames)
    if (name == n) return true;
  auto ends_with = [&](std::string_view s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".safetensors") || ends_with(".safetensors.index.json");
}

bool is_gguf(const std::string &name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0;
}

bool valid_commit(const std::string &c) {
  if (c.empty() || c.size() > 64) return false;
  return std::all_of(c.begin(), c.end(), [](char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
  });
}

[[noreturn]] void throw_hub_error(const RepoSpec &spec, const HttpResult &r, bool have_token) {
  const std::string what = "'" + spec.repo + "'";
  if (r.error_code == "GatedRepo")
    throw Error(ErrorCode::kInvalidArgument,
                what + " is gated: accept its terms on the hub and set HF_TOKEN");
  if (r.error_code == "RevisionNotFound" ||
      (r.status == 404 && r.error_code.empty() && spec.revision != "main"))
    throw Error(ErrorCode::kNotFound,
                "revision '" + spec.revision + "' of " + what + " does not exist on the hub");
  if (r.error_code == "RepoNotFound" || r.status == 404)
    throw Error(ErrorCode::kNotFound, what + " does not exist on the hub" +
                                          (have_token ? "" : " (or it is private: set HF_TOKEN)"));
  if (r.status == 401 || r.status == 403)
    throw Error(ErrorCode::kInvalidArgument,
                have_token ? what + ": the hub refused the token in HF_TOKEN (" +
                                 std::to_string(r.status) + ")"
                           : what + " needs a token: set HF_TOKEN (the hub answered " +
                                 std::to_string(r.status) + ")");
  throw Error(ErrorCode::kUnavailable, what + ": the hub answered " + std::to_string(r.status));
}

struct RepoInfo {
  std::string commit;
  std::vector<RemoteFile> files;
};

// The hub's answer is outside input: parsed with the request parser's limits (nesting,
// keys an object, items an array, bytes a string; core/bounded_json.h), its size bounded
// by HttpLimits::max_reply_bytes before it is read.
RepoInfo parse_info(const RepoSpec &spec, const std::string &url, const std::string &body) {
  JsonParseFailure failure;
  std::optional<json> parsed = parse_bounded_json<json>(body, JsonLimits{}, &failure);
  if (!parsed) {
    if (failure.kind == JsonParseFailure::Kind::kLimit)
      throw Error(ErrorCode::kFormat, "'" + spec.repo + "': the hub's answer to GET " + url +
                                          " is refused: " + failure.message);
    throw Error(ErrorCode::kFormat, "'" + spec.repo + "': the hub's answer to GET " + url +
                                        " is not JSON (" + failure.message + ")");
  }
  const json &j = *parsed;
  if (!j.is_object())
    throw Error(ErrorCode::kFormat,
                "'" + spec.repo + "': the hub's answer to GET " + url + " is not a JSON object");
  RepoInfo info;
  info.commit = j.contains("sha") && j["sha"].is_string() ? j["sha"].get<std::string>() : "";
  if (!valid_commit(info.commit))
    throw Error(ErrorCode::kFormat,
                "'" + spec.repo + "': the hub's answer has no valid commit sha");
  if (!j.contains("siblings") || !j["siblings"].is_array())
    throw Error(ErrorCode::kFormat, "'" + spec.repo + "': the hub's answer lists no files");
  for (const auto &s : j["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
    RemoteFile f;
    f.name = s["rfilename"].get<std::string>();
    // Never written, so cannot be selected: unsafe paths, and the cache's own names.
    if (!is_safe_relative_path(f.name) || is_reserved_cache_name(f.name)) continue;
    if (s.contains("lfs") && s["lfs"].is_object()) {
      f.sha256 = s["lfs"].value("sha256", "");
      f.size = s["lfs"].value("size", std::uint64_t{0});
    }
    if (s.contains("size") && s["size"].is_number_unsigned())
      f.size = s["size"].get<std::uint64_t>();
    f.blob_id = s.value("blobId", "");
    info.files.push_back(std::move(f));
  }
  return info;
}

// The repository's first GGUF files, for an error that tells which one to name.
std::string gguf_names(const RepoInfo &info) {
  std::string names;
  int shown = 0;
  for (const auto &f : info.files)
    if (is_gguf(f.name) && shown++ < 8) names += (names.empty() ? "" : ", ") + f.name;
  return names;
}

std::vector<RemoteFile> select_files(const RepoSpec &spec, const RepoInfo &info,
                                     const std::vector<std::string> &include) {
  std::vector<RemoteFile> out;
  if (!spec.file.empty()) {
    for (const auto &f : info.files)
      if (f.name == spec.file) out.push_back(f);
    if (out.empty()) {
      const std::string ggufs = gguf_names(info);
      throw Error(ErrorCode::kNotFound, "'" + spec.repo + "' has no file '" + spec.file + "'" +
                                            (ggufs.empty() ? "" : " (GGUF files: " + ggufs + ")"));
    }
    return out;
  }
  bool has_weights = false;
  for (const auto &f : info.files) {
    bool take = is_model_file(f.name);
    for (const auto &pat : include)
      if (fnmatch(pat.c_str(), f.name.c_str(), 0) == 0) take = true;
    if (take) out.push_back(f);
    if (f.name.find('/') == std::string::npos && f.name.size() > 12 &&
        f.name.compare(f.name.size() - 12, 12, ".safetensors") == 0)
      has_weights = true;
  }
  if (!has_weights) {
    const std::string ggufs = gguf_names(info);
    if (!ggufs.empty())
      throw Error(ErrorCode::kInvalidArgument,
                  "'" + spec.repo + "' holds GGUF files, no safetensors: name one as " + spec.repo +
                      "/FILE (" + ggufs + ")");
    throw Error(
        ErrorCode::kNotFound,
        "'" + spec.repo + "' has no model weights (*.safetensors or GGUF) at its top level");
  }
  for (const auto &f : out)
    if (f.size == 0 && f.sha256.empty() && f.blob_id.empty())
      throw Error(ErrorCode::kFormat,
                  "'" + spec.repo + "': the hub gave neither size nor hash for " + f.name);
  return out;
}

std::uint64_t file_size_or_zero(const fs::path &p) {
  std::error_code ec;
  const auto s = fs::file_size(p, ec);
  return ec ? 0 : s;
}

// One lock per repository folder, so two pulls (or a serve and a pull) of the same
// repository take turns instead of writing the same .part file.
class RepoLock {
 public:
  RepoLock(const fs::path &dir, std::FILE *progress) {
    fs::create_directories(dir);
    fd_ = ::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw Error(ErrorCode::kResourceExhausted, "cannot create " + (dir / ".lock").string());
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (progress) std::fprintf(progress, "waiting for another pull of the same repository...\n");
      ::flock(fd_, LOCK_EX);
    }
  }
  ~RepoLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  RepoLock(const RepoLock &) = delete;
  RepoLock &operator=(const RepoLock &) = delete;

 private:
  int fd_ = -1;
};

void check_space(const fs::path &dir, std::uint64_t need, const std::string &repo) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
  constexpr std::uint64_t kMargin = 64ull << 20;  // manifests, the filesystem's own needs
  if (need + kMargin > free_bytes)
    throw Error(ErrorCode::kResourceExhausted, "'" + repo + "' needs " + human_bytes(need) +
                                                   " more on " + dir.string() + ", " +
                                                   human_bytes(free_bytes) + " free");
}

std::string digest_label(const RemoteFile &f) {
  if (!f.sha256.empty()) return "sha256:" + f.sha256;
  if (!f.blob_id.empty()) return "git-sha1:" + f.blob_id;
  return "";
}

// Fetches one file into its .part, resuming what is there; verifies it and moves it into
// the snapshot. Returns the bytes fetched.
std::uint64_t fetch_file(const RepoSpec &spec, const RepoInfo &info, const RemoteFile &f,
                         const PullOptions &opt, HubCache &cache, HttpFetch &http,
                         ByteProgress &bar, std::uint64_t &done_total) {
  const fs::path part = cache.partial_path(spec.repo, info.commit, f.name);
  fs::create_directories(part.parent_path());
  const std::string url =
      opt.endpoint + "/" + spec.repo + "/resolve/" + info.commit + "/" + url_escape_path(f.name);
  std::uint64_t offset = file_size_or_zero(part);
  if (f.size && offset > f.size) {
    fs::remove(part);
    offset = 0;
  }
  const std::uint64_t base_total = done_total;
  std::uint64_t fetched = 0;
  std::string last_error;
  bool done = f.size && offset == f.size;
  for (int attempt = 0; !done && attempt < opt.attempts; ++attempt) {
    if (attempt > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(8000, 250 << attempt)));
    std::FILE *out = std::fopen(part.c_str(), offset ? "ab" : "wb");
    if (!out) throw Error(ErrorCode::kResourceExhausted, "cannot write " + part.string());
    const std::uint64_t start = offset;
    ProgressFn on_bytes = [&](std::uint64_t now) {
      done_total = base_total + start + now;
      bar.update(done_total, f.name);
      return true;
    };
    bool resumed = false;
    int write_errno = 0;
    HttpResult r = http.download(url, out, offset, on_bytes, resumed, write_errno);
    const bool flushed = std::fflush(out) == 0;
    if (!flushed && !write_errno) write_errno = errno ? errno : EIO;
    std::fclose(out);
    const std::uint64_t now_size = file_size_or_zero(part);
    fetched += now_size - std::min(now_size, offset);
    if (write_errno)
      throw Error(ErrorCode::kResourceExhausted,
                  "writing " + f.name + " to " + part.parent_path().string() +
                      " failed: " + std::strerror(write_errno) +
                      " (the partial file is kept: run again to resume)");
    if (r.status == 200 && offset > 0 && !resumed) {
      // The server ignored the range: start the file over.
      fs::remove(part);
      offset = 0;
      last_error = r.error;
      continue;
    }
    if ((r.status == 200 || r.status == 206) && r.error.empty()) {
      done = true;
      break;
    }
    if (r.status == 401 || r.status == 403 || r.status == 404 || r.status == 416) {
      if (r.status == 416) fs::remove(part);  // our offset is past the end: a stale .part
      throw_hub_error(spec, r, !opt.token.empty());
    }
    last_error = r.status ? "the hub answered " + std::to_string(r.status) : r.error;
    offset = now_size;
  }
  if (!done)
    throw Error(ErrorCode::kUnavailable,
                "download of " + f.name + " stopped at " + human_bytes(file_size_or_zero(part)) +
                    " of " + human_bytes(f.size) + " after " + std::to_string(opt.attempts) +
                    " attempts (" + last_error + "): run the same command again to resume");
  const std::uint64_t got = file_size_or_zero(part);
  if (f.size && got != f.size) {
    fs::remove(part);
    throw Error(ErrorCode::kFormat, f.name + ": downloaded " + std::to_string(got) +
                                        " bytes, the hub says " + std::to_string(f.size) +
                                        " (the partial file was removed: run again)");
  }
  if (!f.sha256.empty() || !f.blob_id.empty()) {
    const DigestKind kind = f.sha256.empty() ? DigestKind::kGitBlobSha1 : DigestKind::kSha256;
    const std::string want = f.sha256.empty() ? f.blob_id : f.sha256;
    const std::string have = digest_file(part, kind, got);
    if (have != want) {
      fs::remove(part);
      throw Error(ErrorCode::kFormat,
                  f.name + ": " + (kind == DigestKind::kSha256 ? "SHA-256" : "git blob id") +
                      " mismatch (the hub says " + want + ", the download is " + have +
                      "): the file was removed, nothing was installed");
    }
  }
  const fs::path dest = cache.snapshot_file(spec.repo, info.commit, f.name);
  fs::create_directories(dest.parent_path());
  fs::rename(part, dest);
  cache.add_file(spec.repo, info.commit, CachedFile{f.name, got, digest_label(f)});
  done_total = base_total + f.size;
  bar.update(done_total, f.name);
  return fetched;
}

}  // namespace

void apply_environment(PullOptions &opt) {
  if (opt.endpoint.empty()) {
    opt.endpoint = getenv_str("HF_ENDPOINT");
    if (opt.endpoint.empty()) opt.endpoint = "https://huggingface.co";
  }
  while (!opt.endpoint.empty() && opt.endpoint.back() == '/') opt.endpoint.pop_back();
  if (opt.token.empty()) opt.token = getenv_str("HF_TOKEN");
  if (truthy(getenv_str("HF_HUB_OFFLINE")) || truthy(getenv_str("KEEL_OFFLINE")))
    opt.offline = true;
  if (opt.cache_root.empty()) opt.cache_root = default_hub_cache();
}

PullResult find_cached(const RepoSpec &spec, const PullOptions &opt) {
  HubCache cache(opt.cache_root);
  // The revision may be a commit itself, or a name whose commit a pull recorded.
  std::string commit;
  if (valid_commit(spec.revision) && fs::exists(cache.snapshot_dir(spec.repo, spec.revision)))
    commit = spec.revision;
  else if (auto c = cache.ref_commit(spec.repo, spec.revision))
    commit = *c;
  const std::string what = spec.repo + (spec.revision == "main" ? "" : ":" + spec.revision) +
                           (spec.file.empty() ? "" : "/" + spec.file);
  if (commit.empty())
    throw Error(ErrorCode::kNotFound,
                "'" + what + "' is not in the cache " + opt.cache_root.string() + " (offline)");
  const bool whole = spec.file.empty() ? cache.model_complete(spec.repo, commit)
                                       : cache.has_file(spec.repo, commit, spec.file);
  if (!whole)
    throw Error(ErrorCode::kNotFound, "'" + what + "' is only partly in the cache " +
                                          opt.cache_root.string() + ": run keel pull online");
  PullResult r;
  r.commit = commit;
  r.path = cache.snapshot_dir(spec.repo, commit);
  if (!spec.file.empty()) r.path /= spec.file;
  r.from_cache_only = true;
  return r;
}

PullResult pull(const RepoSpec &spec, const PullOptions &opt) {
  if (opt.offline) return find_cached(spec, opt);
  HubCache cache(opt.cache_root);
  HttpFetch http(opt.token, opt.limits);
  const std::string info_url = opt.endpoint + "/api/models/" + spec.repo + "/revision/" +
                               url_escape_segment(spec.revision) + "?blobs=true";
  HttpResult r = http.get(info_url);
  if (r.too_large)
    throw Error(ErrorCode::kFormat, "'" + spec.repo + "': the hub's answer to GET " + info_url +
                                        " is refused: " + r.error);
  if (r.status == 0) {
    // The hub is unreachable: a complete cached copy still serves, with a warning.
    try {
      PullResult cached = find_cached(spec, opt);
      if (opt.progress)
        std::fprintf(opt.progress, "warning: %s unreachable (%s): using the cached copy\n",
                     opt.endpoint.c_str(), r.error.c_str());
      return cached;
    } catch (const Error &) {
      throw Error(ErrorCode::kUnavailable, "cannot reach " + opt.endpoint + " (" + r.error +
                                               ") and '" + spec.repo + "' is not in the cache");
    }
  }
  if (r.status != 200) throw_hub_error(spec, r, !opt.token.empty());
  const RepoInfo info = parse_info(spec, info_url, r.body);
  const std::vector<RemoteFile> files = select_files(spec, info, opt.include);

  RepoLock lock(cache.repo_dir(spec.repo), opt.progress);
  std::uint64_t total = 0, need = 0;
  for (const auto &f : files) {
    total += f.size;
    if (cache.has_file(spec.repo, info.commit, f.name)) continue;
    const std::uint64_t part =
        file_size_or_zero(cache.partial_path(spec.repo, info.commit, f.name));
    need += f.size - std::min(f.size, part);
  }
  check_space(cache.repo_dir(spec.repo), need, spec.repo);

  PullResult result;
  result.commit = info.commit;
  result.files = static_cast<int>(files.size());
  ByteProgress bar(opt.progress, "pull " + spec.repo, total);
  std::uint64_t done_total = 0;
  for (const auto &f : files) {
    if (cache.has_file(spec.repo, info.commit, f.name)) {
      done_total += f.size;
      bar.update(done_total, f.name);
      continue;
    }
    result.downloaded += fetch_file(spec, info, f, opt, cache, http, bar, done_total);
  }
  bar.finish();
  std::vector<std::string> names;
  for (const auto &f : files) names.push_back(f.name);
  cache.mark_complete(spec.repo, info.commit, names, spec.file.empty());
  cache.write_ref(spec.repo, spec.revision, info.commit);
  // A finished commit's partial folder holds nothing worth keeping.
  std::error_code ec;
  fs::remove_all(cache.repo_dir(spec.repo) / "partial" / info.commit, ec);
  result.path = cache.snapshot_dir(spec.repo, info.commit);
  if (!spec.file.empty()) result.path /= spec.file;
  return result;
}

}  // namespace keel::hub
