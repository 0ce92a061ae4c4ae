// parse_conversation.
#include "data/chat_conversation.hpp"

#include <functional>
#include <map>
#include <set>

#include "base/error.hpp"

namespace superoffload::data {

namespace {

// ShareGPT's speakers, as HF datasets and LLaMA-Factory map them.
const std::map<std::string, std::string>& sharegpt_roles() {
  static const std::map<std::string, std::string> roles{
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
  const std::set<std::string> roles{"system", "developer", "user", "assistant", "tool", "ipython", "function"};
  for (size_t i = 0; i < turns.size(); ++i) {
    const auto& turn = turns[i];
    const std::function<std::string()> at = [&where, i] { return where() + ": turn " + std::to_string(i); };
    if (!turn.is_object()) refuse(at, "a turn must be a JSON object, not " + std::string(turn.type_name()), "");
    nlohmann::ordered_json message = nlohmann::ordered_json::object();
    if (sharegpt) {
      if (!turn.contains("from") || !turn.at("from").is_string()) {
        refuse(at, "a ShareGPT turn needs \"from\" (human, gpt, system, tool)", "");
      }
      const auto speaker = turn.at("from").get<std::string>();
      const auto role = sharegpt_roles().find(speaker);
      if (role == sharegpt_roles().end()) {
        refuse(at, "unknown ShareGPT speaker \"" + speaker + "\"", "use human, gpt, system, tool or function_call");
      }
      message["role"] = role->second;
      message["content"] = turn.contains("value") ? turn.at("value") : nlohmann::ordered_json();
      for (auto it = turn.begin(); it != turn.end(); ++it) {
        if (it.key() != "from" && it.key() != "value") message[it.key()] = it.value();
      }
    } else {
      if (!turn.contains("role") || !turn.at("role").is_string()) {
        refuse(at, "a message needs \"role\" (system, user, assistant, tool)", "");
      }
      const auto role = turn.at("role").get<std::string>();
      if (!roles.count(role)) refuse(at, "unknown role \"" + role + "\"", "use system, developer, user, assistant or tool");
      message = turn;
    }
    if (message.contains("content")) {
      const auto& content = message.at("content");
      if (!content.is_string() && !content.is_array() && !content.is_null()) {
        refuse(at, "\"content\" must be a string, a list of parts or null, not " + std::string(content.type_name()), "");
      }
    }
    out.messages.push_back(std::move(message));
  }
  if (record.contains("tools")) out.tools = record.at("tools");
  if (record.contains("documents")) out.documents = record.at("documents");
  return out;
}

}  // namespace superoffload::data
