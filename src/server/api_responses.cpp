// POST /v1/responses and the stored-response endpoints. A Responses request is
// converted to a chat request (openai::parse_responses) and generated like
// /v1/chat/completions; the ResponseBuilder turns its text into output items and
// stream events. store: true keeps the response (bounded, with a TTL) for GET,
// DELETE, cancel and previous_response_id.
#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "server/api_server.h"
#include "server/context_budget.h"
#include "server/forced_tool_call.h"
#include "server/generation.h"
#include "server/json_fields.h"
#include "server/openai/responses_types.h"
#include "server/thinking_budget_fields.h"
#include "text/reasoning_parser.h"

namespace keel::server {

using json = nlohmann::ordered_json;

namespace {

// A background response's generation, for /cancel. A cancel that comes before the
// generation is attached (between storing the response and starting it) is kept and
// applied by attach(), so the generation is stopped either way.
struct CancelHandle {
  std::mutex mu;
  std::weak_ptr<Generation> generation;
  bool cancelled = false;
  void cancel() {
    std::shared_ptr<Generation> g;
    {
      std::lock_guard lock(mu);
      cancelled = true;
      g = generation.lock();
    }
    if (g) g->abort();
  }
  void attach(const std::shared_ptr<Generation> &g) {
    bool stop = false;
    {
      std::lock_guard lock(mu);
      generation = g;
      stop = cancelled;
    }
    if (stop) g->abort();
  }
};

ApiError not_found(const std::string &id) {
  return {404, "response_id: no stored response '" + id + "'", "response_id"};
}

// Input items get ids when stored, as OpenAI gives them, so that input_items lists them
// and item_reference can name them: "msg_<response>_in<k>" and the like.
void name_input_items(json &conversation, const std::string &response_id) {
  const std::string suffix = response_id.substr(response_id.find('_') + 1);
  for (std::size_t k = 0; k < conversation.size(); ++k) {
    json &item = conversation[k];
    if (item.contains("id") && item["id"].is_string()) continue;
    const std::string type = item.value("type", std::string("message"));
    const char *prefix = type == "function_call"          ? "fc_"
                         : type == "function_call_output" ? "fco_"
                         : type == "reasoning"            ? "rs_"
                                                          : "msg_";
    item["id"] = prefix + suffix + "_in" + std::to_string(k);
  }
}

// GET /v1/responses/{id}/input_items: a page of the input, as OpenAI lists it.
json input_items_page(const openai::StoredResponse &stored, const std::string &query) {
  std::int64_t limit = 20;
  if (const std::string v = query_param(query, "limit"); !v.empty()) {
    char *end = nullptr;
    limit = std::strtoll(v.c_str(), &end, 10);
    if (*end != '\0' || limit < 1 || limit > 100)
      fail_field("limit", "must be an integer from 1 to 100");
  }
  std::string order = query_param(query, "order");
  if (order.empty()) order = "desc";
  if (order != "asc" && order != "desc") fail_field("order", "must be 'asc' or 'desc'");
  std::vector<const json *> items;
  for (std::size_t k = 0; k < stored.inputs && k < stored.conversation.size(); ++k)
    items.push_back(&stored.conversation[k]);
  if (order == "desc") std::reverse(items.begin(), items.end());
  std::size_t from = 0;
  if (const std::string after = query_param(query, "after"); !after.empty()) {
    while (from < items.size() && (*items[from]).value("id", "") != after) ++from;
    if (from == items.size()) fail_field("after", "'" + after + "' is not an input item of it");
    ++from;
  }
  json data = json::array();
  for (std::size_t k = from; k < items.size() && data.size() < static_cast<std::size_t>(limit); ++k)
    data.push_back(*items[k]);
  const bool more = from + data.size() < items.size();
  return {{"object", "list"},
          {"data", data},
          {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
          {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
          {"has_more", more}};
}

}  // namespace

void ApiServer::handle_responses(const HttpRequest &req,
                                 const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  note_model(ch, body);
  // A running background response has no conversation to continue yet.
  auto previous = [this](const std::string &id) -> std::optional<json> {
    auto s = responses_.get(id);
    if (!s || s->response.value("status", "") == "in_progress") return std::nullopt;
    return s->conversation;
  };
  auto item = [this](const std::string &id) { return responses_.find_item(id); };
  auto rr =
      std::make_shared<openai::ResponsesRequest>(openai::parse_responses(body, previous, item));
  require_model(rr->chat.model);
  ModelLease lease = registry_.acquire(rr->chat.model, load_deadline());
  ChatPrompt prompt = encode_chat_prompt(*lease->text, rr->chat.messages, rr->chat.tools,
                                         rr->chat.template_kwargs, "input");
  GenerationSpec spec;
  rr->chat.sampling.max_tokens = fit_max_tokens(lease->info.context_length, prompt.tokens.size(),
                                                rr->chat.max_tokens, "input");
  if (rr->chat.forces_tool_call())
    force_tool_call(rr->chat.sampling, tool_call_format_of(*lease->text), rr->chat.tools,
                    rr->chat.tool_choice_name);
  else if (options_.forced_tool)
    apply_forced_tool_option(*options_.forced_tool, rr->chat.model, rr->chat.sampling,
                             tool_call_format_of(*lease->text), rr->chat.tools, rr->chat.messages);
  set_thinking_budget(rr->chat.sampling, *lease->text,
                      rr->reasoning_effort ? thinking_budget_for_effort(*rr->reasoning_effort)
                                           : thinking_budget_of_kwargs(rr->chat.template_kwargs),
                      prompt.opens_reasoning);
  const bool opens_reasoning = prompt.opens_reasoning;
  spec.prompts.push_back(std::move(prompt.tokens));
  spec.sampling = rr->chat.sampling;

  auto ctx = std::make_shared<openai::ResponseContext>();
  ctx->id = new_id("resp_");
  ctx->created_at = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  ctx->model = rr->chat.model;
  ctx->text = lease->text;
  ctx->prompt_opens_reasoning = opens_reasoning;
  name_input_items(rr->conversation, ctx->id);
  const std::size_t inputs = rr->conversation.size();
  auto builder = std::make_shared<openai::ResponseBuilder>(*ctx, *rr);
  builder->set_streaming(rr->chat.stream);

  // Runs once the generation ended: the final response, stored when asked.
  auto settle = [this, rr, ctx, builder, inputs](const Generation &gen) {
    const ChoiceResult &r = gen.results()[0];
    if (!rr->chat.stream) builder->feed(r.text);  // a stream fed it delta by delta
    std::string events = builder->finish(r.finish, r.error, gen.prompt_tokens(),
                                         gen.completion_tokens(), gen.cached_tokens());
    if (rr->store) {
      json conversation = rr->conversation;
      for (const auto &item : builder->output()) conversation.push_back(item);
      if (rr->background)
        responses_.settle(ctx->id, builder->response(), std::move(conversation));
      else
        responses_.put(ctx->id, {builder->response(), std::move(conversation), inputs, nullptr});
    }
    return events;
  };

  if (rr->background) {
    auto handle = std::make_shared<CancelHandle>();
    json queued = builder->initial();
    responses_.put(ctx->id, {queued, rr->conversation, inputs, [handle] { handle->cancel(); }});
    std::shared_ptr<Generation> g;
    try {
      g = Generation::start(std::move(lease), std::move(spec), next_request_id_, nullptr,
                            [this, settle](const Generation &gen) {
                              settle(gen);
                              if (gen.any_error(nullptr)) generations_failed_++;
                            });
    } catch (...) {
      responses_.erase(ctx->id);  // never started: nothing to poll
      throw;
    }
    handle->attach(g);
    generations_started_++;
    send_json(ch, 200, queued.dump(-1, ' ', false, json::error_handler_t::replace));
    return;
  }
  GenerationWire wire;
  wire.stream = rr->chat.stream;
  auto events = std::make_shared<std::string>();  // the closing events settle leaves
  wire.ended = [settle, events](const Generation &gen) { *events = settle(gen); };
  wire.body = [builder](const Generation &) {
    return builder->response().dump(-1, ' ', false, json::error_handler_t::replace);
  };
  wire.opening = builder->start_events();
  wire.delta = [builder, rr, ctx](const ChoiceDelta &d) {  // the builder refers to rr and ctx
    return d.text.empty() ? std::string() : builder->feed(d.text);
  };
  wire.error = [](const ApiError &e) {
    return openai::response_sse({{"type", "error"},
                                 {"code", "server_error"},
                                 {"message", e.message},
                                 {"param", nullptr},
                                 {"sequence_number", 2}});
  };
  // A failed choice is the closing response.failed event.
  wire.choice_error = [](const ChoiceDelta &) { return std::string(); };
  wire.closing = [events](const Generation &) { return *events; };
  serve_generation(ch, std::move(lease), std::move(spec), std::move(wire));
}

void ApiServer::handle_stored_response(const HttpRequest &req, const std::string &id,
                                       const std::string &action,
                                       const std::shared_ptr<ResponseChannel> &ch) {
  auto stored = responses_.get(id);
  if (!stored) throw ApiErrorException{not_found(id)};
  auto dump = [](const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
  if (req.method == "DELETE") {
    responses_.erase(id);  // a running one's generation is stopped
    send_json(ch, 200, dump({{"id", id}, {"object", "response"}, {"deleted", true}}));
    return;
  }
  if (action == "input_items") {
    send_json(ch, 200, dump(input_items_page(*stored, req.query)));
    return;
  }
  if (action == "cancel") {
    if (!stored->response.value("background", false))
      throw ApiErrorException{
          {400, "response_id: only background responses can be cancelled", "response_id"}};
    // The store moves the state: cancelled now (and for good) if it still ran; a
    // response that already ended keeps its terminal state.
    openai::CancelResult r = responses_.cancel(id);
    if (r.outcome == openai::CancelOutcome::kGone) throw ApiErrorException{not_found(id)};
    send_json(ch, 200, dump(r.response));
    return;
  }
  send_json(ch, 200, dump(stored->response));
}

}  // namespace keel::server
