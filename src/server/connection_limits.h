// How many connections the server can hold: every connection is a descriptor, so the
// cap follows the process's open-files limit, which keel serve first raises from its
// soft value (often 1,024) to the hard maximum. Some descriptors stay for everything
// else the front opens (engine sockets, model and tokenizer files, the dashboard's
// benchmark client, hub downloads).
#pragma once

#include <cstdint>
#include <string>

namespace keel::server {

struct OpenFilesLimit {
  std::uint64_t before = 0;  // the soft limit found at start
  std::uint64_t now = 0;     // the soft limit after raising it
  std::string error;         // why raising failed (the limit stays `before`), or empty
};

// Raises RLIMIT_NOFILE's soft limit to its hard limit (or fs.nr_open when the hard
// limit is unlimited). The process's own limit: engines it spawns inherit it.
OpenFilesLimit raise_open_files_limit();

// Connections for `open_files` descriptors: all but a reserve of 256 (an eighth of
// small limits), at least 16.
std::size_t connections_for_open_files(std::uint64_t open_files);

}  // namespace keel::server
