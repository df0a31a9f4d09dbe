// `keel pull ORG/NAME[:REVISION][/FILE]`: fetches a Hugging Face repository's model
// files (safetensors, config, tokenizer) or one named file (a GGUF) into the hub cache,
// resumable and verified, and prints the folder `keel serve` loads. HF_TOKEN,
// HF_ENDPOINT and HF_HUB_OFFLINE are honoured.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "hub/byte_progress.h"
#include "hub/hub_pull.h"

namespace keel::cli {

int cmd_pull(int argc, char **argv) {
  CLI::App app{"keel pull: download a model from a Hugging Face hub into the cache"};
  std::string spec_text, cache_dir, endpoint;
  std::vector<std::string> include;
  bool offline = false, quiet = false;
  int attempts = 5;
  long stall_s = 30;
  app.add_option("repository", spec_text,
                 "ORG/NAME[:REVISION] (the model's safetensors, config and tokenizer), or "
                 "ORG/NAME[:REVISION]/FILE for one file (a GGUF)")
      ->required();
  app.add_option("--hub-cache", cache_dir,
                 "cache folder (default: $KEEL_HUB_CACHE, else ~/.cache/keel/hub)")
      ->envname("KEEL_HUB_CACHE");
  app.add_option("--endpoint", endpoint,
                 "hub address (default: $HF_ENDPOINT, else huggingface.co)");
  app.add_option("--include", include, "also fetch files matching this glob (repeat)");
  app.add_flag("--offline", offline, "use the cache only (also HF_HUB_OFFLINE=1)");
  app.add_option("--attempts", attempts, "tries per file, each resuming the last")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--stall-timeout", stall_s,
                 "seconds of a nearly idle connection before it is retried")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "no progress output");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  // A file-size limit (a quota, ulimit -f) makes the write fail with EFBIG, which the
  // pull reports with the partial file kept, instead of killing the process.
  ::signal(SIGXFSZ, SIG_IGN);
  auto spec = hub::parse_repo_spec(spec_text);
  if (!spec)
    throw Error(ErrorCode::kInvalidArgument,
                "'" + spec_text + "' is not a repository: expected ORG/NAME[:REVISION][/FILE]");
  hub::PullOptions opt;
  opt.cache_root = cache_dir;
  opt.endpoint = endpoint;
  opt.offline = offline;
  opt.include = include;
  opt.attempts = attempts;
  opt.limits.stall_seconds = stall_s;
  opt.progress = quiet ? nullptr : stderr;
  hub::apply_environment(opt);
  const hub::PullResult r = hub::pull(*spec, opt);
  if (!quiet) {
    if (r.from_cache_only)
      std::fprintf(stderr, "%s: from the cache (commit %s)\n", spec->repo.c_str(),
                   r.commit.c_str());
    else
      std::fprintf(stderr, "%s: %d files at commit %s, %s downloaded\n", spec->repo.c_str(),
                   r.files, r.commit.c_str(), hub::human_bytes(r.downloaded).c_str());
  }
  std::printf("%s\n", r.path.c_str());
  return 0;
}

}  // namespace keel::cli
