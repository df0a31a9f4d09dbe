// What rank 0 of a tensor-parallel group sends its workers: the worker's
// configuration once, then one command per operation that every rank must do
// together (a forward pass, a KV block copy, a KV block save or load, shutdown).
// Binary, checked on decode: a malformed message is Error(kFormat), never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "exec/forward_batch.h"

namespace keel::tp {

enum class Command : std::uint8_t { kForward = 1, kCopyBlock, kSaveBlock, kLoadBlock, kShutdown };

struct WorkerConfig {
  int rank = 0, size = 1;
  std::string model;  // HF directory or GGUF file
  int threads = 1;
  std::int32_t num_blocks = 256, block_size = 16;
  std::int64_t op_timeout_ms = 60000;
};

std::string encode_config(const WorkerConfig &c);
WorkerConfig decode_config(std::string_view bytes);

// [u8 command][payload]
std::string encode_forward(const ForwardBatch &batch);
std::string encode_blocks(Command cmd, std::int32_t a, std::int32_t b = 0);
Command command_of(std::string_view message);  // throws kFormat on an unknown command
void decode_forward(std::string_view message, ForwardBatch &batch);
void decode_blocks(std::string_view message, std::int32_t &a, std::int32_t &b);

}  // namespace keel::tp
