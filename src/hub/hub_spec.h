// A Hugging Face repository named on the command line: ORG/NAME, an optional
// :REVISION (branch, tag or commit; `main` when absent) and an optional /FILE inside the
// repository (a GGUF checkpoint, which carries its own tokenizer). Names are checked
// here so that nothing taken from a spec can climb out of the cache directory.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace keel::hub {

struct RepoSpec {
  std::string repo;               // "ORG/NAME"
  std::string revision = "main";  // as asked for; resolved to a commit by the hub
  std::string file;               // empty: the repository's model files
};

// nullopt when `text` is not shaped like a repository (a local path, say); throws
// Error(kInvalidArgument) when it is shaped like one but a part is not allowed.
std::optional<RepoSpec> parse_repo_spec(std::string_view text);

// The repository's folder name in the cache: ORG--NAME.
std::string repo_folder(const std::string &repo);

// True when `rel` is a relative path of plain names (no "..", no leading "/", no
// backslash, no empty or dot part): the only file names a download may write.
bool is_safe_relative_path(std::string_view rel);

}  // namespace keel::hub
