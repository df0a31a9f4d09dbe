#include "engine/mtp_drafter.h"

namespace keel {

MtpDrafter::MtpDrafter(ModelRunner &runner)
    : HiddenStateDrafter(runner.config().hidden_size, runner.config().hidden_size),
      runner_(runner) {}

}  // namespace keel
