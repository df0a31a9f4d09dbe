// The one skeleton of every generating endpoint (chat, completions, messages,
// responses): streamed or not, a failed choice, a client that leaves.
#include <chrono>

#include "server/api_server.h"
#include "server/constraint_vocabulary.h"
#include "server/request_log.h"

namespace keel::server {

namespace {

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

}  // namespace

void ApiServer::serve_generation(const std::shared_ptr<ResponseChannel> &ch, ModelLease lease,
                                 GenerationSpec spec, GenerationWire wire_in) {
  // Before a stream begins: a grammar this vocabulary cannot write is a 400, not an
  // engine error after the 200.
  if (lease->text) check_constraint_vocabulary(spec.sampling, *lease->text);
  // Shared by the callbacks, which run on the engine client's thread.
  auto wire = std::make_shared<const GenerationWire>(std::move(wire_in));
  std::shared_ptr<Generation> g;
  if (!wire->stream) {
    g = Generation::start(
        std::move(lease), std::move(spec), next_request_id_,
        [ch](const ChoiceDelta &d) { note_first_token(ch, d); },
        [this, ch, wire](const Generation &gen) {
          if (wire->ended) wire->ended(gen);
          note_tokens(ch, gen);
          std::string err;
          if (gen.any_error(&err)) {
            generations_failed_++;
            send_error(ch, wire->format, {503, err, ""});
            return;
          }
          ch->send(200, "application/json", wire->body(gen));
        });
  } else {
    ch->begin_sse();
    if (!wire->opening.empty()) ch->write(wire->opening);
    try {
      g = Generation::start(
          std::move(lease), std::move(spec), next_request_id_,
          [ch, wire](const ChoiceDelta &d) {
            note_first_token(ch, d);
            std::string out;
            if (d.first && wire->first) out += wire->first(d);
            if (d.finish == FinishReason::kError)
              out += wire->choice_error ? wire->choice_error(d) : wire->error({503, d.error, ""});
            else if (d.finish != FinishReason::kAbort)  // an abort: the client has left
              out += wire->delta(d);
            if (!out.empty()) ch->write(std::move(out));
          },
          [this, ch, wire](const Generation &gen) {
            if (wire->ended) wire->ended(gen);
            note_tokens(ch, gen);
            if (gen.any_error(nullptr)) generations_failed_++;
            std::string out = wire->closing(gen);
            if (!out.empty()) ch->write(std::move(out));
            ch->end();
          });
    } catch (const Error &e) {
      ch->write(wire->error(api_error_from(e)));
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

}  // namespace keel::server
