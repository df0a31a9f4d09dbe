#include "server/openai/openai_types.h"

namespace keel::server::openai {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json bytes_of(const std::string &s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

std::string tok(const RenderContext &ctx, TokenId id) {
  return ctx.text ? ctx.text->token_text(id) : std::to_string(id);
}

json chat_logprob_entries(const RenderContext &ctx, const std::vector<TokenId> &tokens,
                          const std::vector<TokenLogprob> &lps,
                          const std::vector<std::vector<TokenLogprob>> &top) {
  json content = json::array();
  for (std::size_t i = 0; i < tokens.size() && i < lps.size(); ++i) {
    const std::string t = tok(ctx, tokens[i]);
    json tops = json::array();
    if (i < top.size())
      for (const auto &alt : top[i]) {
        const std::string at = tok(ctx, alt.token);
        tops.push_back({{"token", at}, {"logprob", alt.logprob}, {"bytes", bytes_of(at)}});
      }
    content.push_back({{"token", t},
                       {"logprob", lps[i].logprob},
                       {"bytes", bytes_of(t)},
                       {"top_logprobs", tops}});
  }
  return content;
}

// The wire's finish_reason: an engine stop and a stop string are both "stop".
const char *openai_finish(FinishReason f) { return f == FinishReason::kLength ? "length" : "stop"; }

// A stop after tool calls is "tool_calls"; a cut-off stays "length".
const char *finish_with_calls(FinishReason f, int calls) {
  return calls > 0 && f != FinishReason::kLength ? "tool_calls" : openai_finish(f);
}

json tool_call_json(const RenderContext &ctx, int choice, int k, const ParsedToolCall &c,
                    bool with_index) {
  json j = json::object();
  if (with_index) j["index"] = k;
  j["id"] = tool_call_id(ctx, choice, k);
  j["type"] = "function";
  j["function"] = {{"name", c.name}, {"arguments", c.arguments}};
  return j;
}

// Characters (code points) in UTF-8 text: every byte that is not a continuation byte.
std::size_t code_points(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Where each token's text starts in the choice's text, in characters (code points, as
// OpenAI counts them; not UTF-8 bytes), from `pos` on (advanced past them): the pieces
// a detokenizer prints, so tokens that print nothing (BOS, EOS) take no room and the
// offsets index the text the choice returns.
std::vector<std::size_t> text_offsets(const RenderContext &ctx, StreamingDetokenizer *detok,
                                      const std::vector<TokenId> &tokens, std::size_t &pos) {
  std::vector<std::size_t> offs;
  offs.reserve(tokens.size());
  for (TokenId t : tokens) {
    offs.push_back(pos);
    pos += code_points(detok ? detok->push(t) : tok(ctx, t));
  }
  return offs;
}

std::unique_ptr<StreamingDetokenizer> detokenizer(const RenderContext &ctx) {
  return ctx.text ? ctx.text->streaming() : nullptr;
}

// Legacy completions logprobs over (prompt tokens if echoed) + generated tokens, with
// each part's text offsets.
json completion_logprobs(const RenderContext &ctx, const std::vector<TokenId> &echo_tokens,
                         const std::vector<std::optional<TokenLogprob>> &echo_lp,
                         const std::vector<std::vector<TokenLogprob>> &echo_top,
                         const std::vector<std::size_t> &echo_offsets,
                         const std::vector<TokenId> &tokens, const std::vector<TokenLogprob> &lps,
                         const std::vector<std::vector<TokenLogprob>> &top,
                         const std::vector<std::size_t> &offsets) {
  json toks = json::array(), tlps = json::array(), tops = json::array(), offs = json::array();
  auto add = [&](TokenId id, const std::optional<float> &lp, const std::vector<TokenLogprob> *alts,
                 std::size_t off) {
    toks.push_back(tok(ctx, id));
    tlps.push_back(lp ? json(*lp) : json(nullptr));
    if (alts) {
      json m = json::object();
      for (const auto &a : *alts) m[tok(ctx, a.token)] = a.logprob;
      tops.push_back(m);
    } else {
      tops.push_back(nullptr);
    }
    offs.push_back(off);
  };
  for (std::size_t i = 0; i < echo_tokens.size(); ++i) {
    std::optional<float> lp;
    if (i < echo_lp.size() && echo_lp[i]) lp = echo_lp[i]->logprob;
    const std::vector<TokenLogprob> *alts = (lp && i < echo_top.size()) ? &echo_top[i] : nullptr;
    add(echo_tokens[i], lp, alts, echo_offsets[i]);
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::optional<float> lp;
    if (i < lps.size()) lp = lps[i].logprob;
    add(tokens[i], lp, i < top.size() ? &top[i] : nullptr, offsets[i]);
  }
  return {
      {"tokens", toks}, {"token_logprobs", tlps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

}  // namespace

json usage_json(const Generation &g) {
  const int p = g.prompt_tokens(), c = g.completion_tokens();
  return {{"prompt_tokens", p},
          {"completion_tokens", c},
          {"total_tokens", p + c},
          {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens()}}}};
}

std::string render_chat(const RenderContext &ctx, const ChatRequest &req, const Generation &g) {
  json choices = json::array();
  const auto &results = g.results();
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto &r = results[i];
    json lp = nullptr;
    if (req.logprobs)
      lp = {{"content", chat_logprob_entries(ctx, r.tokens, r.logprobs, r.top)},
            {"refusal", nullptr}};
    auto reasoning = ReasoningParser::for_format(tool_call_format(ctx), ctx.opens_reasoning);
    ReasoningSplit split = reasoning.feed(r.text);
    const ReasoningSplit rest = reasoning.finish();
    split.reasoning += rest.reasoning;
    split.content += rest.content;
    json message{{"role", "assistant"}, {"content", split.content}, {"refusal", nullptr}};
    if (!split.reasoning.empty()) {
      // reasoning_content as vLLM and DeepSeek name it; reasoning, the newer name.
      message["reasoning_content"] = split.reasoning;
      message["reasoning"] = split.reasoning;
    }
    int calls = 0;
    if (req.parses_tool_calls()) {
      auto parsed = parse_tool_calls(split.content, tool_call_format(ctx), req.tool_names,
                                     r.finish == FinishReason::kLength);
      calls = static_cast<int>(parsed.calls.size());
      if (calls > 0) {
        // As OpenAI: content is null when the turn is only tool calls.
        message["content"] = parsed.content.empty() ? json(nullptr) : json(parsed.content);
        json tc = json::array();
        for (int k = 0; k < calls; ++k)
          tc.push_back(tool_call_json(ctx, static_cast<int>(i), k, parsed.calls[k], false));
        message["tool_calls"] = std::move(tc);
      }
    }
    choices.push_back({{"index", i},
                       {"message", message},
                       {"logprobs", lp},
                       {"finish_reason", finish_with_calls(r.finish, calls)}});
  }
  return dump({{"id", ctx.id},
               {"object", "chat.completion"},
               {"created", ctx.created},
               {"model", ctx.model},
               {"choices", choices},
               {"usage", usage_json(g)},
               {"system_fingerprint", nullptr}});
}

std::string chat_chunk_role(const RenderContext &ctx, int index) {
  return dump({{"id", ctx.id},
               {"object", "chat.completion.chunk"},
               {"created", ctx.created},
               {"model", ctx.model},
               {"choices", json::array({{{"index", index},
                                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                                         {"logprobs", nullptr},
                                         {"finish_reason", nullptr}}})}});
}

namespace {

// What a delta settles for its choice: the reasoning split off first, then the
// answer's events (through the tool-call parser when the request parses calls). Text
// that may be the start of a think marker or a call is held back; a call's arguments
// stream as the model writes them (kCallStart, kCallArgs..., kCallEnd), so markup
// that turns out malformed after its call started stays a call (text/tool_call_parser.h).
// The choice's state is made on first use.
struct DeltaParts {
  std::string reasoning;
  std::vector<ToolParseEvent> events;
  ChoiceToolStream *stream = nullptr;
};

DeltaParts delta_parts(const RenderContext &ctx, const ChatRequest &req, const ChoiceDelta &d) {
  auto it = ctx.tool_streams.find(d.index);
  if (it == ctx.tool_streams.end()) {
    it = ctx.tool_streams
             .emplace(d.index,
                      ChoiceToolStream{
                          ToolCallParser(tool_call_format(ctx), req.tool_names), 0,
                          ReasoningParser::for_format(tool_call_format(ctx), ctx.opens_reasoning)})
             .first;
    it->second.parser.set_stream_arguments(true);
    it->second.reasoning.set_stream_calls(true);
  }
  DeltaParts p;
  p.stream = &it->second;
  ReasoningSplit split = it->second.reasoning.feed(d.text);
  if (d.finish) {
    const ReasoningSplit rest = it->second.reasoning.finish();
    split.reasoning += rest.reasoning;
    split.content += rest.content;
  }
  p.reasoning = std::move(split.reasoning);
  if (!req.parses_tool_calls()) {
    if (!split.content.empty()) {
      ToolParseEvent e;
      e.text = std::move(split.content);
      p.events.push_back(std::move(e));
    }
    return p;
  }
  p.events = it->second.parser.feed(split.content);
  if (d.finish) {
    auto rest = it->second.parser.finish(*d.finish == FinishReason::kLength);
    p.events.insert(p.events.end(), rest.begin(), rest.end());
  }
  return p;
}

json reasoning_delta(const std::string &text) {
  return {{"reasoning_content", text}, {"reasoning", text}};
}

std::string chunk(const RenderContext &ctx, const ChatRequest &req, int index, json delta,
                  json logprobs, json finish) {
  json j{{"id", ctx.id},
         {"object", "chat.completion.chunk"},
         {"created", ctx.created},
         {"model", ctx.model},
         {"choices", json::array({{{"index", index},
                                   {"delta", std::move(delta)},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", std::move(finish)}}})}};
  if (req.include_usage) j["usage"] = nullptr;
  return dump(j);
}

json delta_logprobs(const RenderContext &ctx, const ChatRequest &req, const ChoiceDelta &d) {
  if (!req.logprobs || d.tokens.empty()) return nullptr;
  return {{"content", chat_logprob_entries(ctx, d.tokens, d.logprobs, d.top)}};
}

// A streamed call's first entry: index, id, type and name, with empty arguments.
json call_head(const RenderContext &ctx, int choice, int k, const ToolParseEvent &e) {
  json head = tool_call_json(ctx, choice, k, e.call, true);
  head["function"]["arguments"] = "";
  return head;
}

json call_fragment(int k, const std::string &arguments) {
  return {{"index", k}, {"function", {{"arguments", arguments}}}};
}

}  // namespace

std::string chat_chunk_delta(const RenderContext &ctx, const ChatRequest &req,
                             const ChoiceDelta &d) {
  // One chunk per delta: a call's entries as in chat_chunks, a started call's fragments
  // merged into its last entry.
  DeltaParts p = delta_parts(ctx, req, d);
  json delta = p.reasoning.empty() ? json::object() : reasoning_delta(p.reasoning);
  std::string content;
  json tc = json::array();
  for (const auto &e : p.events) {
    switch (e.kind) {
      case ToolParseEvent::Kind::kText:
        content += e.text;
        break;
      case ToolParseEvent::Kind::kCallStart:
        tc.push_back(call_head(ctx, d.index, p.stream->calls++, e));
        break;
      case ToolParseEvent::Kind::kCallArgs:
        if (!tc.empty() && tc.back()["index"] == p.stream->calls - 1)
          tc.back()["function"]["arguments"].get_ref<std::string &>() += e.text;
        else
          tc.push_back(call_fragment(p.stream->calls - 1, e.text));
        break;
      case ToolParseEvent::Kind::kCall:  // not with streamed arguments
      case ToolParseEvent::Kind::kCallEnd:
        break;
    }
  }
  if (!content.empty()) delta["content"] = content;
  if (!tc.empty()) delta["tool_calls"] = std::move(tc);
  return chunk(ctx, req, d.index, std::move(delta), delta_logprobs(ctx, req, d),
               d.finish ? json(finish_with_calls(*d.finish, p.stream->calls)) : json(nullptr));
}

std::vector<std::string> chat_chunks(const RenderContext &ctx, const ChatRequest &req,
                                     const ChoiceDelta &d) {
  DeltaParts p = delta_parts(ctx, req, d);
  ChoiceToolStream *ts = p.stream;
  std::vector<json> deltas;
  if (!p.reasoning.empty()) deltas.push_back(reasoning_delta(p.reasoning));
  for (const auto &e : p.events) {
    // As OpenAI streams a call: index, id and name with empty arguments, then the
    // arguments in fragments as the model writes them; nothing marks its end.
    switch (e.kind) {
      case ToolParseEvent::Kind::kText:
        deltas.push_back({{"content", e.text}});
        break;
      case ToolParseEvent::Kind::kCallStart:
        deltas.push_back({{"tool_calls", json::array({call_head(ctx, d.index, ts->calls++, e)})}});
        break;
      case ToolParseEvent::Kind::kCallArgs:
        deltas.push_back({{"tool_calls", json::array({call_fragment(ts->calls - 1, e.text)})}});
        break;
      case ToolParseEvent::Kind::kCall:  // not with streamed arguments
      case ToolParseEvent::Kind::kCallEnd:
        break;
    }
  }
  json lp = delta_logprobs(ctx, req, d);
  if (deltas.empty() && (d.finish || !lp.is_null())) deltas.push_back(json::object());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    const bool last = i + 1 == deltas.size();
    out.push_back(
        chunk(ctx, req, d.index, std::move(deltas[i]), i == 0 ? lp : json(nullptr),
              last && d.finish ? json(finish_with_calls(*d.finish, ts->calls)) : json(nullptr)));
  }
  return out;
}

std::string chat_chunk_usage(const RenderContext &ctx, const Generation &g) {
  return dump({{"id", ctx.id},
               {"object", "chat.completion.chunk"},
               {"created", ctx.created},
               {"model", ctx.model},
               {"choices", json::array()},
               {"usage", usage_json(g)}});
}

std::string render_completion(const RenderContext &ctx, const CompletionRequest &req,
                              const Generation &g, const std::vector<std::string> &prompt_texts) {
  json choices = json::array();
  const auto &results = g.results();
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto &r = results[i];
    std::string text = r.text;
    const std::vector<TokenId> *echo_tokens = nullptr;
    static const std::vector<TokenId> none;
    if (req.echo) {
      text = prompt_texts[r.prompt_index] + text;
      echo_tokens = &g.spec().prompts[r.prompt_index];
    }
    json lp = nullptr;
    if (req.logprobs >= 0) {
      const auto &echoed = echo_tokens ? *echo_tokens : none;
      std::size_t pos = 0;
      const auto echo_offs = text_offsets(ctx, detokenizer(ctx).get(), echoed, pos);
      pos = req.echo ? code_points(prompt_texts[r.prompt_index]) : 0;
      const auto offs = text_offsets(ctx, detokenizer(ctx).get(), r.tokens, pos);
      lp = completion_logprobs(ctx, echoed, r.prompt_logprobs, r.prompt_top, echo_offs, r.tokens,
                               r.logprobs, r.top, offs);
    }
    choices.push_back({{"index", i},
                       {"text", text},
                       {"logprobs", lp},
                       {"finish_reason", openai_finish(r.finish)}});
  }
  return dump({{"id", ctx.id},
               {"object", "text_completion"},
               {"created", ctx.created},
               {"model", ctx.model},
               {"choices", choices},
               {"usage", usage_json(g)},
               {"system_fingerprint", nullptr}});
}

std::string completion_chunk(const RenderContext &ctx, const CompletionRequest &req,
                             const ChoiceDelta &d, const std::string &echo_prefix,
                             const std::vector<TokenId> &echo_tokens,
                             const std::vector<std::optional<TokenLogprob>> &echo_logprobs,
                             const std::vector<std::vector<TokenLogprob>> &echo_top) {
  json lp = nullptr;
  if (req.logprobs >= 0) {
    // Offsets run over the whole choice's text (echo and every chunk so far), as in the
    // unstreamed answer; the choice's detokenizer carries across chunks.
    auto &st = ctx.completion_offsets[d.index];
    if (!st.detok) st.detok = detokenizer(ctx);
    std::size_t echo_pos = 0;
    const auto echo_offs = text_offsets(ctx, detokenizer(ctx).get(), echo_tokens, echo_pos);
    if (!echo_prefix.empty()) st.pos = code_points(echo_prefix);
    const auto offs = text_offsets(ctx, st.detok.get(), d.tokens, st.pos);
    lp = completion_logprobs(ctx, echo_tokens, echo_logprobs, echo_top, echo_offs, d.tokens,
                             d.logprobs, d.top, offs);
  }
  json choice{{"index", d.index},
              {"text", echo_prefix + d.text},
              {"logprobs", lp},
              {"finish_reason", d.finish ? json(openai_finish(*d.finish)) : json(nullptr)}};
  json j{{"id", ctx.id},
         {"object", "text_completion"},
         {"created", ctx.created},
         {"model", ctx.model},
         {"choices", json::array({choice})}};
  if (req.include_usage) j["usage"] = nullptr;
  return dump(j);
}

std::string completion_chunk_usage(const RenderContext &ctx, const Generation &g) {
  return dump({{"id", ctx.id},
               {"object", "text_completion"},
               {"created", ctx.created},
               {"model", ctx.model},
               {"choices", json::array()},
               {"usage", usage_json(g)}});
}

}  // namespace keel::server::openai
