// The payloads of IPC frames (ipc_frame.h), as JSON. Both sides of the process
// boundary use these functions, so the wire shape lives in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "engine/load_progress.h"

namespace keel::ipc {

// What an engine child reports once its model is loaded: the facts the front needs to
// validate requests without touching the model's tensors.
struct ReadyInfo {
  std::int64_t context_length = 0;
  std::int64_t vocab_size = 0;
  std::vector<TokenId> eos_token_ids;
  std::int64_t memory_bytes = 0;  // weights + KV cache, as the engine allocated them
  // memory_bytes by part (issue 21): weights as stored, the KV pool, workspace
  // (activations, sampler, measured on CUDA), host tier; the pool's size and how it was chosen.
  std::int64_t weights_bytes = 0, kv_bytes = 0, workspace_bytes = 0, host_tier_bytes = 0;
  std::int64_t kv_block_size = 0, device_total_bytes = 0;
  std::string kv_rule;
  // How the weights are held where they run: "bf16", "q4_k+q6_k", "bf16+fp8", "mxfp4".
  std::string weights_format;
  std::int64_t pid = 0;
  std::string backend;  // "cpu", "cuda:0"
};

std::string encode_ready(const ReadyInfo &info);
ReadyInfo decode_ready(const std::string &payload);

std::string encode_submit(const GenerationRequest &request);
GenerationRequest decode_submit(const std::string &payload);

std::string encode_abort(RequestId id);
RequestId decode_abort(const std::string &payload);

std::string encode_event(const RequestEvent &event);
RequestEvent decode_event(const std::string &payload);

std::string encode_status(const EngineStatus &status);
EngineStatus decode_status(const std::string &payload);

std::string encode_progress(const LoadProgress &progress);
LoadProgress decode_progress(const std::string &payload);

std::string encode_fault(const FaultSpec &spec);
FaultSpec decode_fault(const std::string &payload);
std::string encode_faults(const std::vector<FaultSpec> &specs);
std::vector<FaultSpec> decode_faults(const std::string &payload);

}  // namespace keel::ipc
