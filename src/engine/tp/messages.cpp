#include "engine/tp/messages.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace keel::tp {

namespace {

[[noreturn]] void bad(const std::string &why) {
  throw Error(ErrorCode::kFormat, "tp message: " + why);
}

void put_u32(std::string &s, std::uint32_t v) { s.append(reinterpret_cast<const char *>(&v), 4); }

template <typename T>
void put_array(std::string &s, const std::vector<T> &v) {
  s.append(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(T));
}

struct Reader {
  std::string_view s;
  std::size_t at = 1;  // past the command byte
  std::uint32_t u32() {
    if (s.size() - at < 4) bad("truncated");
    std::uint32_t v;
    std::memcpy(&v, s.data() + at, 4);
    at += 4;
    return v;
  }
  template <typename T>
  void array(std::vector<T> &v, std::size_t n) {
    if ((s.size() - at) / sizeof(T) < n) bad("truncated");
    v.resize(n);
    std::memcpy(v.data(), s.data() + at, n * sizeof(T));
    at += n * sizeof(T);
  }
};

// A sequence slice on the wire: six int32 fields (logits as 0/1/2).
constexpr std::size_t kSliceFields = 6;

}  // namespace

std::string encode_config(const WorkerConfig &c) {
  nlohmann::json j{{"rank", c.rank},
                   {"size", c.size},
                   {"model", c.model},
                   {"threads", c.threads},
                   {"num_blocks", c.num_blocks},
                   {"block_size", c.block_size},
                   {"op_timeout_ms", c.op_timeout_ms}};
  return j.dump();
}

WorkerConfig decode_config(std::string_view bytes) {
  try {
    const auto j = nlohmann::json::parse(bytes);
    WorkerConfig c;
    c.rank = j.at("rank").get<int>();
    c.size = j.at("size").get<int>();
    c.model = j.at("model").get<std::string>();
    c.threads = j.at("threads").get<int>();
    c.num_blocks = j.at("num_blocks").get<std::int32_t>();
    c.block_size = j.at("block_size").get<std::int32_t>();
    c.op_timeout_ms = j.at("op_timeout_ms").get<std::int64_t>();
    return c;
  } catch (const nlohmann::json::exception &e) {
    bad(std::string("worker config: ") + e.what());
  }
}

std::string encode_forward(const ForwardBatch &b) {
  std::string s(1, static_cast<char>(Command::kForward));
  put_u32(s, static_cast<std::uint32_t>(b.tokens.size()));
  put_u32(s, static_cast<std::uint32_t>(b.seqs.size()));
  put_u32(s, static_cast<std::uint32_t>(b.block_table.size()));
  put_array(s, b.tokens);
  std::vector<std::int32_t> seqs;
  seqs.reserve(b.seqs.size() * kSliceFields);
  for (const SequenceSlice &q : b.seqs)
    seqs.insert(seqs.end(), {q.token_offset, q.num_tokens, q.start_pos, q.block_offset,
                             q.num_blocks, static_cast<std::int32_t>(q.logits)});
  put_array(s, seqs);
  put_array(s, b.block_table);
  return s;
}

std::string encode_blocks(Command cmd, std::int32_t a, std::int32_t b) {
  std::string s(1, static_cast<char>(cmd));
  put_u32(s, static_cast<std::uint32_t>(a));
  put_u32(s, static_cast<std::uint32_t>(b));
  return s;
}

Command command_of(std::string_view message) {
  if (message.empty()) bad("empty");
  const auto c = static_cast<std::uint8_t>(message[0]);
  if (c < static_cast<std::uint8_t>(Command::kForward) ||
      c > static_cast<std::uint8_t>(Command::kShutdown))
    bad("unknown command " + std::to_string(c));
  return static_cast<Command>(c);
}

void decode_forward(std::string_view message, ForwardBatch &b) {
  if (command_of(message) != Command::kForward) bad("not a forward");
  Reader r{message};
  const std::uint32_t nt = r.u32(), ns = r.u32(), nb = r.u32();
  r.array(b.tokens, nt);
  std::vector<std::int32_t> seqs;
  if (ns > message.size()) bad("truncated");
  r.array(seqs, static_cast<std::size_t>(ns) * kSliceFields);
  r.array(b.block_table, nb);
  if (r.at != message.size()) bad("trailing bytes");
  b.seqs.resize(ns);
  for (std::size_t i = 0; i < ns; ++i) {
    const std::int32_t *f = seqs.data() + i * kSliceFields;
    if (f[5] < 0 || f[5] > 2) bad("sequence logits mode");
    b.seqs[i] =
        SequenceSlice{f[0], f[1], f[2], f[3], f[4], static_cast<SequenceSlice::Logits>(f[5])};
  }
}

void decode_blocks(std::string_view message, std::int32_t &a, std::int32_t &b) {
  Reader r{message};
  command_of(message);
  a = static_cast<std::int32_t>(r.u32());
  b = static_cast<std::int32_t>(r.u32());
  if (r.at != message.size()) bad("trailing bytes");
}

}  // namespace keel::tp
