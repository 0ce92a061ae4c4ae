// Chat records and the assistant spans of a rendered conversation (torch-free): ShareGPT roles
// mapped and fields passed through, bad records refused by name, the template found where HF
// keeps it, and the two rules for assistant bytes — {% generation %} blocks, else the prefix
// rule — including a template that rewrites earlier turns (refused).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "data/chat_template.hpp"

namespace d = superoffload::data;
using json = nlohmann::ordered_json;

namespace {

std::string spans_text(const d::RenderedConversation& r) {
  std::string out;
  for (const auto& [begin, end] : r.assistant) out += "[" + r.text.substr(begin, end - begin) + "]";
  return out;
}

TEST(ChatConversation, ShareGptRolesMapAndFieldsPassThrough) {
  const auto c = d::parse_conversation(
      json::parse(R"({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"},
                                        {"from": "gpt", "value": "a", "weight": 1}], "tools": [{"name": "t"}]})"),
      "data.jsonl:3");
  ASSERT_EQ(c.messages.as_list().size(), 3u);
  EXPECT_EQ(c.messages.as_list()[1].repr(), "{'role': 'user', 'content': 'q'}");
  EXPECT_EQ(c.messages.as_list()[2].repr(), "{'role': 'assistant', 'content': 'a', 'weight': 1}");
  EXPECT_EQ(c.tools.repr(), "[{'name': 't'}]");
  const auto openai = d::parse_conversation(
      json::parse(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null,
                     "tool_calls": [{"function": {"name": "f", "arguments": {}}}], "reasoning_content": "r"}]})"),
      "x");
  EXPECT_TRUE(openai.messages.as_list()[1].get("tool_calls").is_list());
  EXPECT_EQ(openai.messages.as_list()[1].get("reasoning_content").repr(), "'r'");
  EXPECT_TRUE(openai.messages.as_list()[1].get("content").is_none());
  EXPECT_TRUE(openai.tools.is_none());
}

TEST(ChatConversation, BadRecordsAreRefusedByName) {
  auto message = [](const char* record) {
    try {
      d::parse_conversation(json::parse(record), "data.jsonl:7");
    } catch (const superoffload::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(R"({"messages": []})"), "data.jsonl:7: \"messages\" must be a non-empty list of turns");
  EXPECT_EQ(message(R"({"messages": [{"role": "wizard", "content": "x"}]})"), "data.jsonl:7: turn 0: unknown role \"wizard\"");
  EXPECT_EQ(message(R"({"messages": [{"content": "x"}]})"),
            "data.jsonl:7: turn 0: a message needs \"role\" (system, user, assistant, tool)");
  EXPECT_EQ(message(R"({"conversations": [{"from": "robot", "value": "x"}]})"),
            "data.jsonl:7: turn 0: unknown ShareGPT speaker \"robot\"");
  EXPECT_EQ(message(R"({"messages": [{"role": "user", "content": 5}]})"),
            "data.jsonl:7: turn 0: \"content\" must be a string, a list of parts or null, not number");
}

const json kConversation = json::parse(R"({"messages": [{"role": "user", "content": "hi"},
  {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}, {"role": "assistant", "content": "ciao"}]})");

TEST(ChatTemplate, PrefixRuleGivesEachAssistantTurnAsGenerated) {
  const d::ChatRenderer renderer({"{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"
                                  "{% if add_generation_prompt %}<assistant>{% endif %}",
                                  "t.jinja"},
                                 json::object());
  const auto r = renderer.render(d::parse_conversation(kConversation, "x"));
  EXPECT_FALSE(r.from_generation_blocks);
  EXPECT_EQ(r.text, "<user>hi</s><assistant>hello</s><user>bye</s><assistant>ciao</s>");
  EXPECT_EQ(spans_text(r), "[hello</s>][ciao</s>]");
}

TEST(ChatTemplate, GenerationBlocksWinAndRewritingTemplatesAreRefused) {
  const d::ChatRenderer blocks({"{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
                                "{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}",
                                "g.jinja"},
                               json::object());
  const auto r = blocks.render(d::parse_conversation(kConversation, "x"));
  EXPECT_TRUE(r.from_generation_blocks);
  EXPECT_EQ(spans_text(r), "[hello][ciao]");
  // The last assistant turn rendered differently from earlier ones (as reasoning templates do).
  const d::ChatRenderer rewriting({"{% for m in messages %}{{ m.content }}{{ '!' if loop.last else '.' }}{% endfor %}",
                                   "r.jinja"},
                                  json::object());
  EXPECT_THROW(rewriting.render(d::parse_conversation(kConversation, "x")), d::NotAPrefix);
}

TEST(ChatTemplate, FoundWhereHfKeepsIt) {
  const auto dir = std::filesystem::temp_directory_path() / ("so_chat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  EXPECT_EQ(d::find_chat_template(dir.string()).text, "D");
  std::ofstream(dir / "chat_template.jinja") << "J";
  EXPECT_EQ(d::find_chat_template(dir.string()).text, "J");
  std::filesystem::remove(dir / "chat_template.jinja");
  std::filesystem::remove(dir / "tokenizer_config.json");
  EXPECT_THROW(d::find_chat_template(dir.string()), superoffload::Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
