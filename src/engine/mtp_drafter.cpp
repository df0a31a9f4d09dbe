#include "engine/mtp_drafter.h"

#include <cstdio>
#include <string>

#include "core/error.h"

namespace keel {

std::unique_ptr<MtpDrafter> MtpDrafter::open(ModelRunner &runner) {
  const std::string model = arch_name(runner.config().arch);
  try {
    runner.load_mtp();
  } catch (const Error &e) {
    throw Error(e.code(), "--speculative mtp: " + model + ": " + e.what());
  }
  if (runner.mtp_weights_bytes() > 0)
    std::fprintf(stderr,
                 "keel engine: MTP layer on the device: %.1f MiB of weights (%.1f MiB more set "
                 "aside)\n",
                 static_cast<double>(runner.mtp_weights_bytes()) / (1 << 20),
                 static_cast<double>(runner.mtp_reserved_bytes()) / (1 << 20));
  return std::make_unique<MtpDrafter>(runner);
}

MtpDrafter::MtpDrafter(ModelRunner &runner)
    : HiddenStateDrafter(runner.config().hidden_size, runner.config().hidden_size),
      runner_(runner) {}

}  // namespace keel
