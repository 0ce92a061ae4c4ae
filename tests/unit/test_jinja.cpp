// The Jinja engine's own contract, beyond what tests/jinja/jinja_parity.py compares with jinja2:
// errors name the template, line and column and what was expected; raise_exception is its own
// error type; limits stop hostile templates; a template parses once and renders many times;
// JSON read straight into values (how `prepare` reads chat records) equals JSON read as a
// document and converted.
#include <gtest/gtest.h>

#include "jinja/template.hpp"

namespace j = superoffload::jinja;

namespace {

std::string error_of(const std::string& source, const nlohmann::ordered_json& variables = {}) {
  try {
    j::Template(source, "chat_template.jinja").render(variables);
  } catch (const j::TemplateError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error from " << source;
  return "";
}

TEST(Jinja, ParseErrorsNameLineColumnAndWhatWasExpected) {
  EXPECT_EQ(error_of("line one\n{% if x %}\nno end"), "chat_template.jinja:3:7: expected {% endif %} before the end of the template");
  EXPECT_EQ(error_of("{{ a + }}"), "chat_template.jinja:1:8: expected an expression, found '}}'");
  EXPECT_EQ(error_of("\n  {% endfor %}"), "chat_template.jinja:2:6: unknown statement 'endfor' (no open block ends here)");
  EXPECT_EQ(error_of("{% for x in y %}{% endif %}"),
            "chat_template.jinja:1:20: expected 'endfor', found 'endif'");
  EXPECT_NE(error_of("{{ 'open").find("chat_template.jinja:1:4: a string is never closed"), std::string::npos);
}

TEST(Jinja, BytesThatAreNotUtf8AreRefusedWhereTheyAre) {
  // A template saved in Latin-1, a cut multi-byte character, a UTF-16 surrogate, an overlong '/':
  // refused at their line and column, so no rendered text or message carries them on.
  EXPECT_EQ(error_of("ok\n  caf\xe9"), "chat_template.jinja:2:6: the template is not valid UTF-8 (byte 0xE9); save it as UTF-8");
  EXPECT_EQ(error_of("\xe2\x9c"), "chat_template.jinja:1:1: the template is not valid UTF-8 (byte 0xE2); save it as UTF-8");
  EXPECT_NE(error_of("{{ '\xed\xa0\x80' }}").find("not valid UTF-8 (byte 0xED)"), std::string::npos);
  EXPECT_NE(error_of("\xc0\xaf").find("not valid UTF-8 (byte 0xC0)"), std::string::npos);
  // A character that starts no token is named whole, not by its first byte.
  EXPECT_EQ(error_of("{{ a ✓ }}"), "chat_template.jinja:1:6: unexpected character '✓'");
}

TEST(Jinja, RenderErrorsNameWhereAndWhy) {
  EXPECT_EQ(error_of("ok\n{{ messages[0].content + 1 }}", {{"messages", {{{"content", "hi"}}}}}),
            "chat_template.jinja:2:24: unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_EQ(error_of("{{ x | shout }}"), "chat_template.jinja:1:8: no filter named 'shout'");
  EXPECT_EQ(error_of("{{ user.name }}"), "chat_template.jinja:1:8: 'user' is undefined");
}

TEST(Jinja, WhatPythonAloneCanDoIsRefusedPlainly) {
  // Python's ints have no bound, and a negative number to a fractional power is complex:
  // neither occurs in a chat template, and neither may wrap around or print nan here.
  EXPECT_EQ(error_of("{{ 2 ** 64 }}"), "chat_template.jinja:1:6: an integer power past 64 bits");
  EXPECT_NE(error_of("{{ (-2.5) ** 0.5 }}").find("complex number"), std::string::npos);
  EXPECT_NE(error_of("{{ '%s' % 'x' }}").find("printf-style formatting"), std::string::npos);
}

TEST(Jinja, RaiseExceptionIsItsOwnError) {
  try {
    j::Template("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}", "t")
        .render(nlohmann::ordered_json{{"messages", {{{"role", "system"}}}}});
    FAIL() << "expected raise_exception to throw";
  } catch (const j::RaisedException& e) {
    EXPECT_NE(std::string(e.what()).find("System role not supported"), std::string::npos) << e.what();
  }
}

TEST(Jinja, LimitsStopHostileTemplates) {
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("macro calls nest deeper than 256"),
            std::string::npos);
  j::TemplateOptions few;
  few.max_steps = 10'000;
  try {
    j::Template("{% for i in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}", "t", few).render(nlohmann::ordered_json::object());
    FAIL() << "expected the step limit";
  } catch (const j::TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 10000 steps"), std::string::npos) << e.what();
  }
  EXPECT_NE(error_of("{{ range(1000000) }}").find("range too big"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}").find("nests deeper than"),
            std::string::npos);
}

TEST(Jinja, ParsedOnceRenderedManyTimesWithGenerationSpans) {
  const j::Template t("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                      "{% endgeneration %}{% else %}[{{ m.content }}]{% endif %}{% endfor %}",
                      "t");
  for (const char* reply : {"yes", "naïve ✓"}) {
    const auto out = t.render(nlohmann::ordered_json{{"messages", {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", reply}}}}});
    EXPECT_EQ(out.text, std::string("[q]") + reply);
    ASSERT_EQ(out.generation.size(), 1u);
    EXPECT_EQ(out.text.substr(out.generation[0].first, out.generation[0].second - out.generation[0].first), reply);
  }
}

}  // namespace

TEST(Jinja, JsonReadStraightIntoValuesEqualsTheConvertedDocument) {
  for (const char* text : {R"({"messages": [{"role": "user", "content": "h\u00e9 \ud83d\ude00"}, {"role": "assistant",
                               "content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"x": [1, 2.5, -3]}}}]}],
                               "tools": [], "flag": true, "big": 18446744073709551615, "tiny": 1e-300})",
                           R"([1, [2, [3, {}]], "x"])", R"("just a string")", R"(null)"}) {
    EXPECT_EQ(j::Value::parse_json(text).repr(), j::Value::from_json(nlohmann::ordered_json::parse(text)).repr()) << text;
  }
  // A repeated key keeps its first place and its last value, as Python's json.loads and nlohmann.
  EXPECT_EQ(j::Value::parse_json(R"({"a": 1, "b": 2, "a": 3})").repr(), "{'a': 3, 'b': 2}");
  // Not JSON: nlohmann's own parse_error, as nlohmann::json::parse throws it.
  for (const char* text : {R"({"a": )", R"({"a": 1} x)", "", R"({"a": 1e999})"}) {
    EXPECT_THROW(j::Value::parse_json(text), nlohmann::json::exception) << text;
  }
  // Nesting deep enough to overflow the stack when freed is refused, not crashed on.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THROW(j::Value::parse_json(deep), std::invalid_argument);
}
