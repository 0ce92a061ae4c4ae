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

// A value's JSON type, as the record's author wrote it ("number", not Python's "int").
std::string json_type_name(const jinja::Value& v) {
  if (v.is_none()) return "null";
  if (v.is_bool()) return "boolean";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_list()) return "array";
  if (v.is_dict()) return "object";
  return v.type_name();
}

bool is_chat_record(const nlohmann::ordered_json& record) {
  return record.is_object() && (record.contains("messages") || record.contains("conversations"));
}

Conversation parse_conversation(const nlohmann::ordered_json& record, const std::string& where) {
  return parse_conversation(jinja::Value::from_json(record), [&where] { return where; });
}

Conversation parse_conversation(const nlohmann::ordered_json& record, const std::function<std::string()>& where) {
  return parse_conversation(jinja::Value::from_json(record), where);
}

Conversation parse_conversation(const jinja::Value& record, const std::function<std::string()>& where) {
  if (!record.is_dict()) refuse(where, "a chat record must be a JSON object", "write one {\"messages\": [...]} per line");
  const jinja::Value* openai = jinja::find(record.as_dict(), std::string_view("messages"));
  const jinja::Value* sharegpt = openai ? nullptr : jinja::find(record.as_dict(), std::string_view("conversations"));
  if (!openai && !sharegpt) {
    refuse(where, "a chat record needs \"messages\" (or ShareGPT's \"conversations\")",
           "write {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]} per line, or set [data] format to "
           "the records' kind");
  }
  const jinja::Value& turns = openai ? *openai : *sharegpt;
  if (!turns.is_list() || turns.as_list().empty()) {
    refuse(where, std::string("\"") + (sharegpt ? "conversations" : "messages") + "\" must be a non-empty list of turns",
           "write the turns as [{\"role\": \"user\", \"content\": \"...\"}, {\"role\": \"assistant\", ...}]");
  }
  static const std::set<std::string, std::less<>> roles{"system", "developer", "user", "assistant", "tool", "ipython", "function"};
  Conversation out;
  jinja::List mapped;  // ShareGPT's turns as messages; OpenAI's are taken as they are
  for (size_t i = 0; i < turns.as_list().size(); ++i) {
    const auto& turn = turns.as_list()[i];
    auto at = [&where, i] { return where() + ": turn " + std::to_string(i); };
    if (!turn.is_dict()) refuse(at(), "a turn must be a JSON object, not " + json_type_name(turn), "");
    const auto& fields = turn.as_dict();
    const jinja::Value* content = jinja::find(fields, std::string_view(sharegpt ? "value" : "content"));
    if (content && !content->is_string() && !content->is_list() && !content->is_none()) {
      refuse(at(), "\"content\" must be a string, a list of parts or null, not " + json_type_name(*content), "");
    }
    if (openai) {
      const jinja::Value* role = jinja::find(fields, std::string_view("role"));
      if (!role || !role->is_string()) refuse(at(), "a message needs \"role\" (system, user, assistant, tool)", "");
      if (!roles.count(role->as_string())) {
        refuse(at(), "unknown role \"" + role->as_string() + "\"", "use system, developer, user, assistant or tool");
      }
      continue;
    }
    const jinja::Value* speaker = jinja::find(fields, std::string_view("from"));
    if (!speaker || !speaker->is_string()) refuse(at(), "a ShareGPT turn needs \"from\" (human, gpt, system, tool)", "");
    const auto role = sharegpt_roles().find(speaker->as_string());
    if (role == sharegpt_roles().end()) {
      refuse(at(), "unknown ShareGPT speaker \"" + speaker->as_string() + "\"", "use human, gpt, system, tool or function_call");
    }
    jinja::Map message;
    message.reserve(fields.size());
    message.emplace_back("role", role->second);
    message.emplace_back("content", content ? *content : jinja::Value(nullptr));
    for (const auto& [key, value] : fields) {
      if (!key.is_string() || (key.as_string() != "from" && key.as_string() != "value")) jinja::insert(message, key, value);
    }
    mapped.emplace_back(std::move(message));
  }
  out.messages = openai ? turns : jinja::Value(std::move(mapped));
  if (const auto* tools = jinja::find(record.as_dict(), std::string_view("tools"))) out.tools = *tools;
  if (const auto* documents = jinja::find(record.as_dict(), std::string_view("documents"))) out.documents = *documents;
  return out;
}

}  // namespace superoffload::data
