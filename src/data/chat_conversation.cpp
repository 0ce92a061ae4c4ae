// parse_conversation.
#include "data/chat_conversation.hpp"

#include <functional>
#include <map>
#include <set>

#include "base/error.hpp"

namespace superoffload::data {

namespace {

// ShareGPT's speakers, as HF datasets and LLaMA-Factory map them.
const std::map<std::string, std::string, std::less<>>& sharegpt_roles() {
  static const std::map<std::string, std::string, std::less<>> roles{
      {"human", "user"},          {"user", "user"},           {"gpt", "assistant"},
      {"assistant", "assistant"}, {"chatgpt", "assistant"},   {"bing", "assistant"},
      {"bard", "assistant"},      {"system", "system"},       {"tool", "tool"},
      {"function", "tool"},       {"observation", "tool"},    {"function_call", "assistant"},
  };
  return roles;
}

[[noreturn]] void refuse(const std::string& where, const std::string& what, const std::string& fix) {
  throw Error(where + ": " + what, fix, Error::UserInput{});
}
[[noreturn]] void refuse(const std::function<std::string()>& where, const std::string& what, const std::string& fix) {
  refuse(where(), what, fix);
}

}  // namespace

bool is_chat_record(const nlohmann::ordered_json& record) {
  return record.is_object() && (record.contains("messages") || record.contains("conversations"));
}

Conversation parse_conversation(const nlohmann::ordered_json& record, const std::string& where) {
  return parse_conversation(record, [&where] { return where; });
}

Conversation parse_conversation(const nlohmann::ordered_json& record, const std::function<std::string()>& where) {
  if (!record.is_object()) refuse(where, "a chat record must be a JSON object", "write one {\"messages\": [...]} per line");
  if (!is_chat_record(record)) {
    refuse(where, "a chat record needs \"messages\" (or ShareGPT's \"conversations\")",
           "write {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]} per line, or set [data] format to "
           "the records' kind");
  }
  Conversation out;
  const bool sharegpt = !record.contains("messages") && record.contains("conversations");
  const auto& turns = sharegpt ? record.at("conversations") : record.contains("messages") ? record.at("messages") : record;
  if (!turns.is_array() || turns.empty()) {
    refuse(where, std::string("\"") + (sharegpt ? "conversations" : "messages") + "\" must be a non-empty list of turns",
           "write the turns as [{\"role\": \"user\", \"content\": \"...\"}, {\"role\": \"assistant\", ...}]");
  }
  static const std::set<std::string, std::less<>> roles{"system", "developer", "user", "assistant", "tool", "ipython", "function"};
  out.messages.reserve(turns.size());
  for (size_t i = 0; i < turns.size(); ++i) {
    const auto& turn = turns[i];
    auto at = [&where, i] { return where() + ": turn " + std::to_string(i); };
    if (!turn.is_object()) refuse(at(), "a turn must be a JSON object, not " + std::string(turn.type_name()), "");
    const auto content = turn.find(sharegpt ? "value" : "content");
    if (content != turn.end() && !content->is_string() && !content->is_array() && !content->is_null()) {
      refuse(at(), "\"content\" must be a string, a list of parts or null, not " + std::string(content->type_name()), "");
    }
    if (!sharegpt) {
      const auto role = turn.find("role");
      if (role == turn.end() || !role->is_string()) refuse(at(), "a message needs \"role\" (system, user, assistant, tool)", "");
      if (!roles.count(role->get_ref<const std::string&>())) {
        refuse(at(), "unknown role \"" + role->get<std::string>() + "\"", "use system, developer, user, assistant or tool");
      }
      out.messages.push_back(jinja::Value::from_json(turn));
      continue;
    }
    const auto speaker = turn.find("from");
    if (speaker == turn.end() || !speaker->is_string()) refuse(at(), "a ShareGPT turn needs \"from\" (human, gpt, system, tool)", "");
    const auto role = sharegpt_roles().find(speaker->get_ref<const std::string&>());
    if (role == sharegpt_roles().end()) {
      refuse(at(), "unknown ShareGPT speaker \"" + speaker->get<std::string>() + "\"", "use human, gpt, system, tool or function_call");
    }
    jinja::Map message;
    message.reserve(turn.size());
    message.emplace_back("role", role->second);
    message.emplace_back("content", content != turn.end() ? jinja::Value::from_json(*content) : jinja::Value(nullptr));
    for (auto it = turn.begin(); it != turn.end(); ++it) {
      if (it.key() != "from" && it.key() != "value") jinja::insert(message, it.key(), jinja::Value::from_json(it.value()));
    }
    out.messages.emplace_back(std::move(message));
  }
  if (const auto tools = record.find("tools"); tools != record.end()) out.tools = jinja::Value::from_json(*tools);
  if (const auto documents = record.find("documents"); documents != record.end()) out.documents = jinja::Value::from_json(*documents);
  return out;
}

}  // namespace superoffload::data
