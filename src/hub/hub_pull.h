// `keel pull`: fetches a repository's model files (or one named file) from a Hugging
// Face hub into the cache, resumable and verified against the hub's sizes and hashes,
// and resolves a repository to its cached folder offline.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "hub/http_fetch.h"
#include "hub/hub_spec.h"

namespace keel::hub {

struct PullOptions {
  std::filesystem::path cache_root;  // default_hub_cache() when empty
  std::string endpoint;              // $HF_ENDPOINT, else https://huggingface.co
  std::string token;                 // $HF_TOKEN (or --token)
  bool offline = false;              // $HF_HUB_OFFLINE=1: the cache only
  std::vector<std::string> include;  // extra glob patterns of files to fetch
  int attempts = 5;                  // per file, resuming after a cut
  HttpLimits limits;
  std::FILE *progress = stderr;  // nullptr: silent
};

struct PullResult {
  std::filesystem::path path;  // the snapshot folder, or the named file in it
  std::string commit;
  std::uint64_t downloaded = 0;  // bytes fetched by this call
  int files = 0;                 // files in the selection
  bool from_cache_only = false;  // nothing asked of the hub (offline, or it was unreachable)
};

// Fills endpoint, token, offline and cache_root from the environment where not set.
void apply_environment(PullOptions &opt);

PullResult pull(const RepoSpec &spec, const PullOptions &opt);

// The cached selection without asking the hub; throws Error(kNotFound) when the cache
// does not hold all of it.
PullResult find_cached(const RepoSpec &spec, const PullOptions &opt);

}  // namespace keel::hub
