#include "cli/commands.h"
#include "core/error.h"

namespace keel::cli {

// Not built yet: see the open issues.
int cmd_perplexity(int, char **) {
  throw Error(ErrorCode::kUnsupported, "this command is not available in this build yet");
}

}  // namespace keel::cli
