// The generating endpoints: OpenAI chat and completions, Anthropic messages. Each
// validates, leases the model (loading it on first use), builds the prompt, starts a
// Generation and renders its deltas; a client that leaves aborts the generation.
#include <algorithm>
#include <chrono>

#include "server/anthropic/anthropic_types.h"
#include "server/api_server.h"
#include "server/context_budget.h"
#include "server/forced_tool_call.h"
#include "server/generation.h"
#include "server/json_fields.h"
#include "server/openai/openai_types.h"
#include "server/request_budget.h"
#include "server/request_log.h"
#include "server/thinking_budget_fields.h"

namespace keel::server {

using json = nlohmann::ordered_json;

namespace {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string sse_data(const std::string &payload) { return "data: " + payload + "\n\n"; }

}  // namespace

void ApiServer::note_model(const std::shared_ptr<ResponseChannel> &ch, const json &body) {
  auto m = body.find("model");
  if (m == body.end() || !m->is_string()) return;
  RequestNotes n;
  n.model = m->get<std::string>();
  note_request(ch, n);
}

void ApiServer::handle_chat(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  note_model(ch, body);
  auto cr = std::make_shared<openai::ChatRequest>(openai::parse_chat(body));
  require_model(cr->model);
  ModelLease lease = registry_.acquire(cr->model, load_deadline());
  GenerationSpec spec;
  ChatPrompt prompt =
      encode_chat_prompt(*lease->text, cr->messages, cr->tools, cr->template_kwargs);
  cr->sampling.max_tokens =
      fit_max_tokens(lease->info.context_length, prompt.tokens.size(), cr->max_tokens, "messages");
  if (!cr->stream && cr->logprobs)
    cr->sampling.max_tokens =
        fit_logprob_budget(cr->n, 0, cr->sampling.max_tokens, cr->max_tokens.has_value(),
                           cr->top_logprobs, cr->top_logprobs > 0 ? "top_logprobs" : "logprobs");
  if (cr->forces_tool_call())
    force_tool_call(cr->sampling, tool_call_format_of(*lease->text), cr->tools,
                    cr->tool_choice_name);
  else if (options_.forced_tool)
    apply_forced_tool_option(*options_.forced_tool, cr->model, cr->sampling,
                             tool_call_format_of(*lease->text), cr->tools, cr->messages);
  set_thinking_budget(cr->sampling, *lease->text, thinking_budget_of_kwargs(cr->template_kwargs),
                      prompt.opens_reasoning);
  spec.prompts.push_back(std::move(prompt.tokens));
  spec.n = cr->n;
  spec.sampling = cr->sampling;
  spec.stop = cr->stop;
  auto ctx = std::make_shared<openai::RenderContext>();
  ctx->id = new_id("chatcmpl-");
  ctx->created = unix_now();
  ctx->model = cr->model;
  ctx->text = lease->text;
  ctx->opens_reasoning = prompt.opens_reasoning;

  GenerationWire wire;
  wire.stream = cr->stream;
  wire.body = [cr, ctx](const Generation &gen) { return openai::render_chat(*ctx, *cr, gen); };
  for (int i = 0; i < cr->n; ++i) wire.opening += sse_data(openai::chat_chunk_role(*ctx, i));
  wire.delta = [cr, ctx](const ChoiceDelta &d) {
    std::string out;
    for (const auto &p : openai::chat_chunks(*ctx, *cr, d)) out += sse_data(p);
    return out;
  };
  wire.error = [](const ApiError &e) { return sse_data(render_openai_error(e)); };
  wire.closing = [cr, ctx](const Generation &gen) {
    std::string out;
    if (cr->include_usage) out += sse_data(openai::chat_chunk_usage(*ctx, gen));
    return out + "data: [DONE]\n\n";
  };
  serve_generation(ch, std::move(lease), std::move(spec), std::move(wire));
}

void ApiServer::handle_completions(const HttpRequest &req,
                                   const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  note_model(ch, body);
  auto cr = std::make_shared<openai::CompletionRequest>(openai::parse_completion(body));
  check_sequences(static_cast<std::int64_t>(cr->prompt_is_tokens ? cr->token_prompts.size()
                                                                 : cr->text_prompts.size()),
                  cr->n, "n");
  require_model(cr->model);
  ModelLease lease = registry_.acquire(cr->model, load_deadline());
  const ModelText &text = *lease->text;
  std::int64_t prompt_bytes = 0;
  for (const auto &s : cr->text_prompts) prompt_bytes += static_cast<std::int64_t>(s.size());
  check_prompt_bytes(prompt_bytes, lease->info.context_length, "prompt");
  GenerationSpec spec;
  auto prompt_texts = std::make_shared<std::vector<std::string>>();
  if (cr->prompt_is_tokens) {
    const std::int64_t vocab =
        lease->info.vocab_size > 0 ? lease->info.vocab_size : text.vocab_size();
    for (const auto &p : cr->token_prompts) {
      for (TokenId t : p)
        if (t >= vocab)
          fail_field("prompt", "token id " + std::to_string(t) +
                                   " is out of range for a vocabulary of " + std::to_string(vocab));
      spec.prompts.push_back(p);
      prompt_texts->push_back(cr->echo ? text.decode(p) : std::string());
    }
  } else {
    for (const auto &s : cr->text_prompts) {
      spec.prompts.push_back(text.encode(s, true));
      if (spec.prompts.back().empty()) fail_field("prompt", "encodes to no tokens");
      prompt_texts->push_back(s);
    }
  }
  cr->sampling.max_tokens =
      fit_max_tokens(lease->info.context_length, spec.prompts, cr->max_tokens, "prompt");
  if (!cr->stream && cr->logprobs >= 0) {
    std::size_t longest = 0;
    for (const auto &p : spec.prompts) longest = std::max(longest, p.size());
    cr->sampling.max_tokens = fit_logprob_budget(
        static_cast<std::int64_t>(spec.prompts.size()) * cr->n,
        cr->echo ? static_cast<std::int64_t>(longest) : 0, cr->sampling.max_tokens,
        /*asked=*/true, cr->logprobs, "logprobs");
  }
  spec.n = cr->n;
  spec.sampling = cr->sampling;
  spec.stop = cr->stop;
  auto ctx = std::make_shared<openai::RenderContext>();
  ctx->id = new_id("cmpl-");
  ctx->created = unix_now();
  ctx->model = cr->model;
  ctx->text = lease->text;

  auto prompts = std::make_shared<std::vector<std::vector<TokenId>>>(spec.prompts);
  const int n = spec.n;
  GenerationWire wire;
  wire.stream = cr->stream;
  wire.body = [cr, ctx, prompt_texts](const Generation &gen) {
    return openai::render_completion(*ctx, *cr, gen, *prompt_texts);
  };
  wire.delta = [cr, ctx, prompt_texts, prompts, n](const ChoiceDelta &d) {
    static const std::vector<TokenId> no_tokens;
    const bool echo = cr->echo && d.first;
    if (!echo && d.text.empty() && !d.finish && (cr->logprobs < 0 || d.tokens.empty()))
      return std::string();
    const int p = d.index / n;
    return sse_data(openai::completion_chunk(
        *ctx, *cr, d, echo ? (*prompt_texts)[p] : std::string(), echo ? (*prompts)[p] : no_tokens,
        d.prompt_logprobs, d.prompt_top));
  };
  wire.error = [](const ApiError &e) { return sse_data(render_openai_error(e)); };
  wire.closing = [cr, ctx](const Generation &gen) {
    std::string out;
    if (cr->include_usage) out += sse_data(openai::completion_chunk_usage(*ctx, gen));
    return out + "data: [DONE]\n\n";
  };
  serve_generation(ch, std::move(lease), std::move(spec), std::move(wire));
}

void ApiServer::handle_messages(const HttpRequest &req,
                                const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  note_model(ch, body);
  auto mr = std::make_shared<anthropic::MessagesRequest>(anthropic::parse_messages(body));
  require_model(mr->model);
  ModelLease lease = registry_.acquire(mr->model, load_deadline());
  GenerationSpec spec;
  ChatPrompt prompt =
      encode_chat_prompt(*lease->text, mr->messages, mr->tools, mr->template_kwargs);
  // Anthropic's own words for an over-long prompt: Claude Code and the SDKs read
  // "prompt is too long: N tokens > M maximum" to compact the conversation instead of
  // retrying it as it is.
  const auto context = lease->info.context_length;
  if (context > 0 && static_cast<std::int64_t>(prompt.tokens.size()) >= context)
    throw ApiErrorException{{400,
                             "prompt is too long: " + std::to_string(prompt.tokens.size()) +
                                 " tokens > " + std::to_string(context - 1) + " maximum",
                             "messages"}};
  mr->sampling.max_tokens =
      fit_max_tokens(context, prompt.tokens.size(), mr->sampling.max_tokens, "messages");
  if (mr->forces_tool_call())
    force_tool_call(mr->sampling, tool_call_format_of(*lease->text), mr->tools,
                    mr->tool_choice_name);
  else if (options_.forced_tool)
    apply_forced_tool_option(*options_.forced_tool, mr->model, mr->sampling,
                             tool_call_format_of(*lease->text), mr->tools, mr->messages);
  set_thinking_budget(mr->sampling, *lease->text,
                      mr->thinking == "enabled"    ? std::optional(mr->thinking_budget)
                      : mr->thinking == "adaptive" ? thinking_budget_for_effort(mr->effort)
                                                   : std::nullopt,
                      prompt.opens_reasoning);
  spec.prompts.push_back(std::move(prompt.tokens));
  spec.sampling = mr->sampling;
  spec.stop = mr->stop_sequences;
  auto ctx = std::make_shared<anthropic::RenderContext>();
  ctx->id = new_id("msg_");
  ctx->model = mr->model;
  ctx->opens_reasoning = prompt.opens_reasoning;
  ctx->thinking_omitted = mr->thinking_omitted;
  anthropic::prepare_tools(*ctx, *mr, *lease->text);
  const int input_tokens = static_cast<int>(spec.prompts[0].size());

  GenerationWire wire;
  wire.format = WireFormat::kAnthropic;
  wire.stream = mr->stream;
  wire.body = [ctx](const Generation &gen) { return anthropic::render_message(*ctx, gen); };
  // message_start waits for the first event, which carries the prefix-cache hit; the
  // HTTP layer's keepalive comments cover a long prefill.
  wire.first = [ctx, input_tokens](const ChoiceDelta &d) {
    return anthropic::stream_start(*ctx, input_tokens, d.cached_prompt_tokens,
                                   d.stored_prompt_tokens);
  };
  auto output_tokens = std::make_shared<int>(0);
  wire.delta = [ctx, output_tokens](const ChoiceDelta &d) {
    *output_tokens += static_cast<int>(d.tokens.size());
    std::string out;
    if (!d.text.empty()) out += anthropic::stream_delta(*ctx, d.text);
    if (d.finish) out += anthropic::stream_finish(*ctx, d, *output_tokens);
    return out;
  };
  wire.error = [](const ApiError &e) { return anthropic::stream_error(e.status, e.message); };
  wire.closing = [](const Generation &) { return std::string(); };
  serve_generation(ch, std::move(lease), std::move(spec), std::move(wire));
}

void ApiServer::handle_count_tokens(const HttpRequest &req,
                                    const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  auto mr = anthropic::parse_messages(body, true);
  require_model(mr.model);
  const ModelText &text = registry_.text(mr.model);
  const auto prompt = encode_chat_prompt(text, mr.messages, mr.tools, mr.template_kwargs);
  send_json(ch, 200, json{{"input_tokens", prompt.tokens.size()}}.dump());
}

}  // namespace keel::server
