// A Jinja template as HuggingFace renders chat templates (jinja2's ImmutableSandboxedEnvironment
// with trim_blocks, lstrip_blocks, loop controls and {% generation %}): parsed once, rendered
// many times, torch-free. What it renders: if/elif/else, for (loop.*, else, a filter in the
// head, break/continue), set (namespace attributes, several targets, block set), macro and
// call, filter blocks, raw; the expressions, tests, filters, string and dict methods and
// globals (raise_exception, strftime_now, range, namespace) that chat templates use — see
// builtins.cpp. Errors name the template, the line and the column; limits on steps, call
// depth and output end a hostile template with an error, never a crash.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/template_error.hpp"
#include "jinja/value.hpp"

namespace superoffload::jinja {

struct TemplateOptions {
  bool trim_blocks = true;    // HF's setting
  bool lstrip_blocks = true;  // HF's setting
  int64_t max_steps = 2'000'000;        // statements, loop iterations and calls per render (a long real conversation takes ~100k)
  int max_call_depth = 256;             // nested macro calls
  size_t max_output_bytes = size_t{256} << 20;
};

struct Rendered {
  std::string text;
  // Byte ranges [begin, end) of the text written inside {% generation %} blocks, in order.
  std::vector<std::pair<size_t, size_t>> generation;
};

struct Node;

class Template {
 public:
  // `name` names the template in errors ("tokenizer_config.json chat_template"). Throws
  // TemplateError for a template that does not parse.
  Template(std::string_view source, std::string name, TemplateOptions options = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `variables` (a JSON object) become the template's variables. Throws TemplateError
  // (RaisedException for raise_exception).
  Rendered render(const nlohmann::ordered_json& variables) const;
  Rendered render(Dict variables) const;
  const std::string& name() const { return name_; }
  // Whether the template marks text with {% generation %} (HF's assistant-token tracking).
  bool has_generation_blocks() const;

 private:
  std::string name_;
  TemplateOptions options_;
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace superoffload::jinja
