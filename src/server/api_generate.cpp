// The generating endpoints: OpenAI chat and completions, Anthropic messages. Each
// validates, leases the model (loading it on first use), builds the prompt, starts a
// Generation and renders its deltas; a client that leaves aborts the generation.
#include <chrono>

#include "server/anthropic/anthropic_types.h"
#include "server/api_server.h"
#include "server/context_budget.h"
#include "server/forced_tool_call.h"
#include "server/generation.h"
#include "server/json_fields.h"
#include "server/openai/openai_types.h"
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

// For the request's log line: when the first choice's first token came.
void note_first_token(const std::shared_ptr<ResponseChannel> &ch, const ChoiceDelta &d) {
  if (!d.first || d.index != 0) return;
  RequestNotes n;
  n.ttft_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                        request_arrival(ch))
                  .count();
  note_request(ch, n);
}

void note_tokens(const std::shared_ptr<ResponseChannel> &ch, const Generation &g) {
  RequestNotes n;
  n.tokens_in = g.prompt_tokens();
  n.tokens_out = g.completion_tokens();
  note_request(ch, n);
}

// The body's model, before validation: a 400 line names the model it was for.
void note_model(const std::shared_ptr<ResponseChannel> &ch, const json &body) {
  auto m = body.find("model");
  if (m == body.end() || !m->is_string()) return;
  RequestNotes n;
  n.model = m->get<std::string>();
  note_request(ch, n);
}

}  // namespace

bool ApiServer::answered_failure(const std::shared_ptr<ResponseChannel> &ch, WireFormat f,
                                 const Generation &gen) {
  note_tokens(ch, gen);
  std::string err;
  if (!gen.any_error(&err)) return false;
  generations_failed_++;
  send_error(ch, f, {503, err, ""});
  return true;
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
  cr->sampling.max_tokens = fit_max_tokens(
      lease->info.context_length, prompt.tokens.size(),
      cr->max_tokens_given ? std::optional<std::int64_t>(cr->sampling.max_tokens) : std::nullopt,
      "messages");
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

  std::shared_ptr<Generation> g;
  if (!cr->stream) {
    g = Generation::start(
        std::move(lease), std::move(spec), next_request_id_,
        [ch](const ChoiceDelta &d) { note_first_token(ch, d); },
        [this, ch, cr, ctx](const Generation &gen) {
          if (answered_failure(ch, WireFormat::kOpenAI, gen)) return;
          ch->send(200, "application/json", openai::render_chat(*ctx, *cr, gen));
        });
  } else {
    ch->begin_sse();
    for (int i = 0; i < cr->n; ++i) ch->write(sse_data(openai::chat_chunk_role(*ctx, i)));
    try {
      g = Generation::start(
          std::move(lease), std::move(spec), next_request_id_,
          [ch, cr, ctx](const ChoiceDelta &d) {
            note_first_token(ch, d);
            if (d.finish == "error") {
              ch->write(sse_data(render_openai_error({503, d.error, ""})));
              return;
            }
            if (d.finish == "abort") return;
            std::string out;
            for (const auto &p : openai::chat_chunks(*ctx, *cr, d)) out += sse_data(p);
            if (!out.empty()) ch->write(std::move(out));
          },
          [ch, cr, ctx](const Generation &gen) {
            note_tokens(ch, gen);
            if (cr->include_usage) ch->write(sse_data(openai::chat_chunk_usage(*ctx, gen)));
            ch->write("data: [DONE]\n\n");
            ch->end();
          });
    } catch (const Error &e) {
      ch->write(sse_data(render_openai_error(api_error_from(e))));
      ch->end();
      return;
    }
  }
  generations_started_++;
  ch->on_close([this, g] {
    client_aborts_++;
    g->abort();
  });
}

void ApiServer::handle_completions(const HttpRequest &req,
                                   const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  note_model(ch, body);
  auto cr = std::make_shared<openai::CompletionRequest>(openai::parse_completion(body));
  require_model(cr->model);
  ModelLease lease = registry_.acquire(cr->model, load_deadline());
  const ModelText &text = *lease->text;
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
  // One max_tokens for every prompt: what the longest leaves.
  const std::int32_t asked = cr->sampling.max_tokens;
  for (const auto &p : spec.prompts)
    cr->sampling.max_tokens =
        std::min(cr->sampling.max_tokens,
                 fit_max_tokens(lease->info.context_length, p.size(), asked, "prompt"));
  spec.n = cr->n;
  spec.sampling = cr->sampling;
  spec.stop = cr->stop;
  auto ctx = std::make_shared<openai::RenderContext>();
  ctx->id = new_id("cmpl-");
  ctx->created = unix_now();
  ctx->model = cr->model;
  ctx->text = lease->text;

  std::shared_ptr<Generation> g;
  if (!cr->stream) {
    g = Generation::start(
        std::move(lease), std::move(spec), next_request_id_,
        [ch](const ChoiceDelta &d) { note_first_token(ch, d); },
        [this, ch, cr, ctx, prompt_texts](const Generation &gen) {
          if (answered_failure(ch, WireFormat::kOpenAI, gen)) return;
          ch->send(200, "application/json",
                   openai::render_completion(*ctx, *cr, gen, *prompt_texts));
        });
  } else {
    ch->begin_sse();
    auto prompts = std::make_shared<std::vector<std::vector<TokenId>>>(spec.prompts);
    const int n = spec.n;
    try {
      g = Generation::start(
          std::move(lease), std::move(spec), next_request_id_,
          [ch, cr, ctx, prompt_texts, prompts, n](const ChoiceDelta &d) {
            note_first_token(ch, d);
            if (d.finish == "error") {
              ch->write(sse_data(render_openai_error({503, d.error, ""})));
              return;
            }
            if (d.finish == "abort") return;
            static const std::vector<TokenId> no_tokens;
            const bool echo = cr->echo && d.first;
            if (!echo && d.text.empty() && !d.finish && (cr->logprobs < 0 || d.tokens.empty()))
              return;
            const int p = d.index / n;
            ch->write(sse_data(openai::completion_chunk(
                *ctx, *cr, d, echo ? (*prompt_texts)[p] : std::string(),
                echo ? (*prompts)[p] : no_tokens, d.prompt_logprobs, d.prompt_top)));
          },
          [ch, cr, ctx](const Generation &gen) {
            note_tokens(ch, gen);
            if (cr->include_usage) ch->write(sse_data(openai::completion_chunk_usage(*ctx, gen)));
            ch->write("data: [DONE]\n\n");
            ch->end();
          });
    } catch (const Error &e) {
      ch->write(sse_data(render_openai_error(api_error_from(e))));
      ch->end();
      return;
    }
  }
  generations_started_++;
  ch->on_close([this, g] {
    client_aborts_++;
    g->abort();
  });
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
  mr->sampling.max_tokens = fit_max_tokens(lease->info.context_length, prompt.tokens.size(),
                                           mr->sampling.max_tokens, "messages");
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

  std::shared_ptr<Generation> g;
  if (!mr->stream) {
    g = Generation::start(
        std::move(lease), std::move(spec), next_request_id_,
        [ch](const ChoiceDelta &d) { note_first_token(ch, d); },
        [this, ch, ctx](const Generation &gen) {
          if (answered_failure(ch, WireFormat::kAnthropic, gen)) return;
          ch->send(200, "application/json", anthropic::render_message(*ctx, gen));
        });
  } else {
    ch->begin_sse();
    // message_start waits for the first event, which carries the prefix-cache hit;
    // the HTTP layer's keepalive comments cover a long prefill.
    auto output_tokens = std::make_shared<int>(0);
    try {
      g = Generation::start(
          std::move(lease), std::move(spec), next_request_id_,
          [ch, ctx, input_tokens, output_tokens](const ChoiceDelta &d) {
            note_first_token(ch, d);
            std::string out;
            if (d.first)
              out += anthropic::stream_start(*ctx, input_tokens, d.cached_prompt_tokens,
                                             d.stored_prompt_tokens);
            *output_tokens += static_cast<int>(d.tokens.size());
            if (d.finish == "error") {
              ch->write(out + anthropic::stream_error(503, d.error));
              return;
            }
            if (d.finish == "abort") return;
            if (!d.text.empty()) out += anthropic::stream_delta(*ctx, d.text);
            if (d.finish) out += anthropic::stream_finish(*ctx, d, *output_tokens);
            if (!out.empty()) ch->write(std::move(out));
          },
          [ch](const Generation &gen) {
            note_tokens(ch, gen);
            ch->end();
          });
    } catch (const Error &e) {
      const ApiError ae = api_error_from(e);
      ch->write(anthropic::stream_error(ae.status, ae.message));
      ch->end();
      return;
    }
  }
  generations_started_++;
  ch->on_close([this, g] {
    client_aborts_++;
    g->abort();
  });
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
