#include "formats/make_eagle3_head.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/make_model.h"

namespace keel {

namespace {

struct Tensor {
  std::string name, dtype;  // "F32", "I64", "BOOL"
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
};

std::uint64_t tensor_seed(std::uint64_t seed, const std::string &name) {
  std::uint64_t h = 0xcbf29ce484222325ull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

Tensor f32(const MakeEagle3Options &o, const std::string &name, std::vector<std::int64_t> shape,
           float mean, float stddev) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  const std::uint64_t s = tensor_seed(o.seed, name);
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] =
        mean + stddev * random_normal(s, static_cast<std::uint64_t>(i));
  if (o.edit) {
    o.edit(name, v);
    if (static_cast<std::int64_t>(v.size()) != n)
      throw Error(ErrorCode::kInvalidArgument, name + ": edited to another size");
  }
  Tensor t{name, "F32", std::move(shape), std::vector<std::byte>(v.size() * 4)};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

void write_safetensors(const std::filesystem::path &path, const std::vector<Tensor> &tensors) {
  nlohmann::ordered_json header;
  std::uint64_t offset = 0;
  for (const Tensor &t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::ofstream f(path, std::ios::binary);
  const std::uint64_t len = h.size();
  f.write(reinterpret_cast<const char *>(&len), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const Tensor &t : tensors)
    f.write(reinterpret_cast<const char *>(t.bytes.data()),
            static_cast<std::streamsize>(t.bytes.size()));
  if (!f) throw Error(ErrorCode::kInternal, path.string() + ": cannot write the EAGLE-3 head");
}

}  // namespace

std::int64_t make_eagle3_head(const MakeEagle3Options &o) {
  const ModelConfig &c = o.target;
  if (c.hidden_size <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 ||
      c.vocab_size <= 1 || c.num_layers <= 0)
    throw Error(ErrorCode::kInvalidArgument, "make-model --eagle3-for: the target has no shape");
  const std::int64_t H = o.hidden.value_or(c.hidden_size), Ht = c.hidden_size, NH = c.num_heads,
                     G = c.num_kv_heads, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const std::int64_t Vd = o.draft_vocab > 0 ? o.draft_vocab : V / 2;
  if (Vd > V)
    throw Error(ErrorCode::kInvalidArgument,
                "make-model --eagle3-for: draft vocab above the target's");
  std::vector<std::int32_t> aux = o.aux_layers;
  if (aux.empty()) {
    const auto L = static_cast<std::int32_t>(c.num_layers);
    aux = {0, L / 2, L - 1};
  }
  const std::int64_t fc_in = o.fc_inputs.value_or(static_cast<std::int64_t>(aux.size()) * Ht);
  auto inv = [](std::int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  std::vector<Tensor> ts;
  ts.push_back(f32(o, "fc.weight", {H, fc_in}, 0, inv(fc_in)));
  ts.push_back(f32(o, "midlayer.input_layernorm.weight", {H}, 1, 0.25f));
  ts.push_back(f32(o, "midlayer.hidden_norm.weight", {H}, 1, 0.25f));
  // q and k a little larger than unit outputs, so that attention is not near uniform.
  ts.push_back(f32(o, "midlayer.self_attn.q_proj.weight", {NH * D, 2 * H}, 0, 1.5f * inv(2 * H)));
  ts.push_back(f32(o, "midlayer.self_attn.k_proj.weight", {G * D, 2 * H}, 0, 1.5f * inv(2 * H)));
  ts.push_back(f32(o, "midlayer.self_attn.v_proj.weight", {G * D, 2 * H}, 0, inv(2 * H)));
  ts.push_back(f32(o, "midlayer.self_attn.o_proj.weight", {H, NH * D}, 0, inv(NH * D)));
  ts.push_back(f32(o, "midlayer.post_attention_layernorm.weight", {H}, 1, 0.25f));
  ts.push_back(f32(o, "midlayer.mlp.gate_proj.weight", {I, H}, 0, inv(H)));
  ts.push_back(f32(o, "midlayer.mlp.up_proj.weight", {I, H}, 0, inv(H)));
  ts.push_back(f32(o, "midlayer.mlp.down_proj.weight", {H, I}, 0, inv(I)));
  ts.push_back(f32(o, "norm.weight", {H}, 1, 0.25f));
  ts.push_back(f32(o, "lm_head.weight", {Vd, H}, 0, inv(H)));
  if (o.own_embed) ts.push_back(f32(o, "embed_tokens.weight", {V, H}, 0, 1.0f));
  // The draft vocabulary: one target id in each stride of V / Vd (a seeded pick in it),
  // increasing, as the released heads keep their most frequent ids in id order.
  const std::int64_t n_d2t = o.d2t_length.value_or(Vd);
  std::vector<std::int64_t> d2t(static_cast<std::size_t>(n_d2t), 0);
  std::vector<std::uint8_t> t2d(static_cast<std::size_t>(V), 0);
  const std::uint64_t ds = tensor_seed(o.seed, "d2t");
  for (std::int64_t d = 0; d < n_d2t; ++d) {
    const std::int64_t lo = d * V / Vd, hi = std::max(lo + 1, (d + 1) * V / Vd);
    const auto pick = static_cast<std::int64_t>(
        std::fabs(random_normal(ds, static_cast<std::uint64_t>(d))) * 1000.0f);
    const std::int64_t id = std::min(V - 1, lo + pick % (hi - lo));
    d2t[static_cast<std::size_t>(d)] = id - d;
    t2d[static_cast<std::size_t>(id)] = 1;
  }
  Tensor td{"d2t", "I64", {n_d2t}, std::vector<std::byte>(d2t.size() * 8)};
  std::memcpy(td.bytes.data(), d2t.data(), td.bytes.size());
  ts.push_back(std::move(td));
  Tensor tt{"t2d", "BOOL", {V}, std::vector<std::byte>(t2d.size())};
  std::memcpy(tt.bytes.data(), t2d.data(), tt.bytes.size());
  ts.push_back(std::move(tt));
  std::erase_if(ts, [&](const Tensor &t) { return t.name == o.omit_tensor; });

  std::filesystem::create_directories(o.out);
  nlohmann::ordered_json cfg = {{"architectures", {"LlamaForCausalLMEagle3"}},
                                {"model_type", "llama"},
                                {"hidden_size", H},
                                {"intermediate_size", I},
                                {"num_attention_heads", NH},
                                {"num_key_value_heads", G},
                                {"head_dim", D},
                                {"num_hidden_layers", 1},
                                {"rms_norm_eps", c.rms_norm_eps},
                                {"rope_theta", c.rope_theta},
                                {"max_position_embeddings", c.max_position_embeddings},
                                {"vocab_size", V},
                                {"draft_vocab_size", Vd},
                                {"target_hidden_size", Ht},
                                {"tie_word_embeddings", false},
                                {"torch_dtype", "float32"},
                                {"eagle_config", {{"eagle_aux_hidden_state_layer_ids", aux}}}};
  {
    std::ofstream f(o.out / "config.json");
    f << cfg.dump(2) << "\n";
    if (!f) throw Error(ErrorCode::kInternal, (o.out / "config.json").string() + ": cannot write");
  }
  write_safetensors(o.out / "model.safetensors", ts);
  std::int64_t bytes = 0;
  for (const Tensor &t : ts) bytes += static_cast<std::int64_t>(t.bytes.size());
  return bytes;
}

}  // namespace keel
