// find_chat_template, ChatRenderer.
#include "data/chat_template.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.hpp"

namespace superoffload::data {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string(), "check the path and its permissions", Error::UserInput{});
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

ChatTemplateSource find_chat_template(const std::string& model_dir, const std::string& override_path) {
  if (!override_path.empty()) return {read_text(override_path), override_path};
  const fs::path dir(model_dir);
  if (fs::exists(dir / "chat_template.jinja")) return {read_text(dir / "chat_template.jinja"), (dir / "chat_template.jinja").string()};
  const auto config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    nlohmann::ordered_json config;
    try {
      config = nlohmann::ordered_json::parse(read_text(config_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(config_path.string() + " is not valid JSON: " + e.what(), "", Error::UserInput{});
    }
    if (config.contains("chat_template")) {
      const auto& value = config.at("chat_template");
      if (value.is_string()) return {value.get<std::string>(), config_path.string() + " chat_template"};
      if (value.is_array()) {  // HF's named templates: the "default" one
        for (const auto& named : value) {
          if (named.is_object() && named.value("name", "") == "default" && named.contains("template")) {
            return {named.at("template").get<std::string>(), config_path.string() + " chat_template (default)"};
          }
        }
      }
    }
  }
  throw Error("no chat template for " + model_dir + ": no chat_template.jinja, and tokenizer_config.json has no \"chat_template\"",
              "set [data] chat_template to a .jinja file written for this model, or use the model's instruct release",
              Error::UserInput{});
}

ChatRenderer::ChatRenderer(const ChatTemplateSource& source, nlohmann::ordered_json variables)
    : template_(source.text, source.origin), origin_(source.origin) {
  for (auto it = variables.begin(); it != variables.end(); ++it) {
    variables_.emplace_back(it.key(), jinja::Value::from_json(it.value()));
  }
  has_generation_blocks_ = template_.has_generation_blocks();
}

jinja::Rendered ChatRenderer::render_prefix(const Conversation& conversation, size_t messages,
                                            bool add_generation_prompt) const {
  const auto& all = conversation.messages.as_list();
  jinja::Dict names;
  names.reserve(variables_.size() + 4);
  names.assign(variables_.begin(), variables_.end());
  names.emplace_back("messages", messages == all.size() ? conversation.messages
                                                        : jinja::List(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(messages)));
  names.emplace_back("tools", conversation.tools);
  names.emplace_back("documents", conversation.documents);
  names.emplace_back("add_generation_prompt", add_generation_prompt);
  return template_.render(std::move(names));
}

RenderedConversation ChatRenderer::render(const Conversation& conversation) const {
  const size_t n = conversation.messages.as_list().size();
  auto whole = render_prefix(conversation, n, false);
  RenderedConversation out;
  out.text = std::move(whole.text);
  if (has_generation_blocks_) {
    out.from_generation_blocks = true;
    for (const auto& span : whole.generation) {
      if (span.second > span.first) out.assistant.push_back(span);
    }
    return out;
  }
  for (size_t i = 0; i < n; ++i) {
    const auto role = conversation.messages.as_list()[i].get("role");
    if (!role.is_string() || role.as_string() != "assistant") continue;
    const auto prompt = render_prefix(conversation, i, true).text;
    const auto through = render_prefix(conversation, i + 1, false).text;
    if (through.compare(0, prompt.size(), prompt) != 0 || out.text.compare(0, through.size(), through) != 0) {
      throw NotAPrefix("the template renders the conversation up to turn " + std::to_string(i) +
                       " as something other than a prefix of the whole (it rewrites earlier turns), so the assistant's "
                       "tokens of that turn cannot be told apart");
    }
    if (through.size() > prompt.size()) out.assistant.emplace_back(prompt.size(), through.size());
  }
  return out;
}

}  // namespace superoffload::data
