// keel template --model PATH --messages FILE [--tools FILE] [--add-generation-prompt]
//               [--kwargs JSON]
// Prints the prompt a model's chat template renders for a conversation, byte for byte
// what HF transformers' apply_chat_template(..., tokenize=False) gives.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "formats/gguf.h"
#include "text/jinja/chat_template.h"

namespace keel::cli {
namespace {

using ojson = nlohmann::ordered_json;

ojson read_json_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorCode::kNotFound, path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  try {
    return ojson::parse(ss.str());
  } catch (const nlohmann::json::exception &e) {
    throw Error(ErrorCode::kFormat, path + ": not valid JSON: " + e.what());
  }
}

}  // namespace

int cmd_template(int argc, char **argv) {
  CLI::App app{"Render a model's chat template for a conversation"};
  std::string model, messages_path, tools_path, kwargs_text;
  bool add_generation_prompt = false;
  app.add_option("--model", model,
                 "HF model directory, tokenizer_config.json, .jinja template or .gguf file")
      ->required();
  app.add_option("--messages", messages_path,
                 "JSON file: an array of messages, or an object with \"messages\" (and \"tools\")")
      ->required();
  app.add_option("--tools", tools_path, "JSON file: an array of tool (function) schemas");
  app.add_flag("--add-generation-prompt", add_generation_prompt,
               "end with the assistant turn's header");
  app.add_option("--kwargs", kwargs_text,
                 "JSON object of extra template variables, e.g. {\"enable_thinking\": false}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }

  std::filesystem::path model_path(model);
  ChatTemplate tpl = ChatTemplate::load(model_path);

  ojson doc = read_json_file(messages_path);
  ojson messages = doc, tools;
  if (doc.is_object()) {
    if (!doc.contains("messages"))
      throw Error(ErrorCode::kInvalidArgument, messages_path + ": no \"messages\" field");
    messages = doc["messages"];
    if (doc.contains("tools")) tools = doc["tools"];
  }
  if (!tools_path.empty()) tools = read_json_file(tools_path);
  ojson kwargs = ojson::object();
  if (!kwargs_text.empty()) {
    try {
      kwargs = ojson::parse(kwargs_text);
    } catch (const nlohmann::json::exception &e) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("--kwargs: not valid JSON: ") + e.what());
    }
    if (!kwargs.is_object())
      throw Error(ErrorCode::kInvalidArgument, "--kwargs: must be a JSON object");
  }
  std::string prompt = tpl.render(messages, tools, add_generation_prompt, kwargs);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  return 0;
}

}  // namespace keel::cli
