// The engine's constraint factory (core/output_constraint.h) backed by this module:
// the model's tokenizer gives each token's bytes; grammars are cached by their text.
#pragma once

#include <filesystem>
#include <memory>

#include "core/output_constraint.h"

namespace keel::grammar {

// Starts loading the tokenizer at `model` (a model directory or tokenizer file) on
// another thread; the factory waits for it on first use. Thread-safe.
OutputConstraintFactory output_constraint_factory(const std::filesystem::path &model);

class TokenVocab;
// The same over a vocabulary already built (benchmarks with a synthetic one).
OutputConstraintFactory output_constraint_factory(std::shared_ptr<const TokenVocab> vocab);

}  // namespace keel::grammar
