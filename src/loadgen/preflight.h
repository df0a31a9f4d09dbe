// Checks before a benchmark run, so that bad input fails at once with a clear message
// instead of as N failed requests: the server answers, takes the key, serves the model,
// and (for completions) whether it takes prompts of token ids.
#pragma once

#include <string>
#include <vector>

#include "loadgen/endpoint.h"

namespace keel::loadgen {

// The ids /v1/models lists. Throws keel::Error: kUnavailable when the server cannot be
// reached, kInvalidArgument on a refused key; an empty list when it has no /v1/models.
std::vector<std::string> served_models(const Endpoint &ep, const std::string &api_key);

// The model to benchmark: `wanted` if the server lists it (or lists nothing), else the
// first it lists when `wanted` is empty. Throws keel::Error (kNotFound) otherwise.
std::string choose_model(const std::vector<std::string> &served, const std::string &wanted,
                         const std::string &server);

// Whether /v1/completions takes a prompt of token ids, the lowest and the highest id a
// workload may draw (a one-token request; a server with a smaller vocabulary refuses it).
// Throws keel::Error (kUnavailable) on a 5xx: the model cannot serve (it failed to load).
bool takes_token_prompts(const Endpoint &ep, const std::string &api_key, const std::string &model,
                         int lowest_id, int highest_id);

}  // namespace keel::loadgen
