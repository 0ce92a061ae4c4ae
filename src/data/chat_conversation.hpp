// A chat record as a conversation a chat template renders: OpenAI/HF records
// {"messages": [{"role", "content", ...}]} as they are, ShareGPT records
// {"conversations": [{"from", "value"}]} with their roles mapped (human → user, gpt →
// assistant, system, tool/function/observation → tool, function_call → assistant). Every
// other field of a message (tool_calls, reasoning_content, thinking, name, ...) and of the
// record (tools, documents) passes through to the template as the record has it.
//
// The conversation is built as the template's values straight from the record: no JSON copy
// of it is made on the way (chat preparation is held to half the speed of plain text).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "jinja/value.hpp"

namespace superoffload::data {

struct Conversation {
  jinja::Value messages = jinja::List();  // a list of dicts: role, content and whatever else the turn has
  jinja::Value tools = nullptr;         // None when the record has none, as HF passes it
  jinja::Value documents = nullptr;     // None when the record has none
};

// Whether a JSON record is a chat record (has "messages" or "conversations").
bool is_chat_record(const nlohmann::ordered_json& record);

// Throws Error naming `where` ("data.jsonl:12") and what is wrong: no messages, a message that
// is not an object, a missing or unknown role, content that is neither a string, a list of
// parts nor null. `where` is called only for an error (finding a JSONL line number reads the
// file up to it). The record as values (jinja::Value::parse_json of the line) is what `prepare`
// reads; an OpenAI record's messages are then used as they are, not copied.
Conversation parse_conversation(const jinja::Value& record, const std::function<std::string()>& where);
Conversation parse_conversation(const nlohmann::ordered_json& record, const std::function<std::string()>& where);
Conversation parse_conversation(const nlohmann::ordered_json& record, const std::string& where);

}  // namespace superoffload::data
