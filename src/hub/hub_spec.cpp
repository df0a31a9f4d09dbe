#include "hub/hub_spec.h"

#include <algorithm>

#include "core/error.h"

namespace keel::hub {

namespace {

// The hub's own rule for a user or repository name: letters, digits, '-', '_', '.',
// not starting with '-' or '.', at most 96 characters.
bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > 96 || s.front() == '-' || s.front() == '.') return false;
  if (s.find("..") != std::string_view::npos) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Git's rule for a ref name, which a branch or tag is: no empty part, no part that starts
// with '.' (so not "." or ".."; a ref file named "." would be the refs folder itself)
// or ends with ".lock"; no control characters or the characters a URL or path treats
// specially.
bool valid_revision(std::string_view s) {
  if (s.empty() || s.size() > 255 || s.find("..") != std::string_view::npos) return false;
  for (char c : s)
    if (static_cast<unsigned char>(c) <= ' ' || c == '\\' || c == ':' || c == '?' || c == '#' ||
        c == '%')
      return false;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t end = std::min(s.find('/', start), s.size());
    const std::string_view part = s.substr(start, end - start);
    if (part.empty() || part.front() == '.' ||
        (part.size() >= 5 && part.substr(part.size() - 5) == ".lock"))
      return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

bool is_safe_relative_path(std::string_view rel) {
  if (rel.empty() || rel.size() > 1024 || rel.front() == '/') return false;
  std::size_t start = 0;
  while (start <= rel.size()) {
    const std::size_t end = std::min(rel.find('/', start), rel.size());
    const std::string_view part = rel.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part)
      if (c == '\\' || static_cast<unsigned char>(c) < ' ') return false;
    start = end + 1;
  }
  return true;
}

std::optional<RepoSpec> parse_repo_spec(std::string_view text) {
  // ORG/NAME[:REV][/FILE...]: the first '/' separates org and name; a ':' after it opens
  // the revision, which ends at the next '/'.
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos || slash == 0) return std::nullopt;
  const std::string_view org = text.substr(0, slash);
  std::string_view rest = text.substr(slash + 1);
  std::size_t name_end = rest.find_first_of(":/");
  const std::string_view name = rest.substr(0, name_end);
  if (!valid_name(org) || !valid_name(name)) {
    // A path like ./models/x or /abs/path is not a repository; neither is anything with
    // characters a repository name cannot have.
    return std::nullopt;
  }
  RepoSpec spec;
  spec.repo = std::string(org) + "/" + std::string(name);
  rest = name_end == std::string_view::npos ? std::string_view{} : rest.substr(name_end);
  if (!rest.empty() && rest.front() == ':') {
    rest.remove_prefix(1);
    const std::size_t rev_end = rest.find('/');
    const std::string_view rev = rest.substr(0, rev_end);
    if (!valid_revision(rev))
      throw Error(ErrorCode::kInvalidArgument,
                  "'" + std::string(text) + "': the revision after ':' is not a valid revision");
    spec.revision = std::string(rev);
    rest = rev_end == std::string_view::npos ? std::string_view{} : rest.substr(rev_end);
  }
  if (!rest.empty()) {
    rest.remove_prefix(1);  // the '/'
    if (!is_safe_relative_path(rest))
      throw Error(ErrorCode::kInvalidArgument,
                  "'" + std::string(text) + "': the file part is not a plain relative path");
    spec.file = std::string(rest);
  }
  return spec;
}

std::string repo_folder(const std::string &repo) {
  std::string out = repo;
  const std::size_t slash = out.find('/');
  if (slash != std::string::npos) out.replace(slash, 1, "--");
  return out;
}

}  // namespace keel::hub
