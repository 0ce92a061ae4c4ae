// The model's own chat template, and which bytes of a rendered conversation are the
// assistant's (what assistant-only loss trains on).
//
// Where the template marks them with {% generation %} blocks (HF's
// return_assistant_tokens_mask), the blocks say. Otherwise each assistant turn is what the
// conversation up to and including it adds beyond the prompt before it rendered with
// add_generation_prompt: the turn's text as the model would generate it. A template that
// renders a shorter conversation as something other than a prefix of the longer one (it
// rewrites earlier turns) has no such spans: the conversation is refused (NotAPrefix), and the
// caller skips and counts it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/chat_conversation.hpp"
#include "jinja/template.hpp"

namespace superoffload::data {

struct ChatTemplateSource {
  std::string text;
  std::string origin;  // the file (and key) it came from, for logs and errors
};

// `override_path` (a .jinja file) if given, else <model_dir>/chat_template.jinja, else
// tokenizer_config.json's "chat_template" (a string, or HF's list of {"name", "template"}: the
// one named "default"). Throws Error naming where it looked when there is none.
ChatTemplateSource find_chat_template(const std::string& model_dir, const std::string& override_path = {});

struct RenderedConversation {
  std::string text;
  std::vector<std::pair<size_t, size_t>> assistant;  // byte ranges [begin, end), in order
  bool from_generation_blocks = false;
};

// A conversation whose prefixes do not render as prefixes of it (see above).
class NotAPrefix : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ChatRenderer {
 public:
  // `variables`: what every render gets besides the conversation (bos_token, eos_token, and
  // template switches such as enable_thinking).
  ChatRenderer(const ChatTemplateSource& source, nlohmann::ordered_json variables);
  // Throws jinja::TemplateError (jinja::RaisedException when the template refuses the
  // conversation) or NotAPrefix.
  RenderedConversation render(const Conversation& conversation) const;
  const std::string& origin() const { return origin_; }

 private:
  jinja::Rendered render_prefix(const Conversation& conversation, size_t messages, bool add_generation_prompt) const;
  jinja::Template template_;
  std::string origin_;
  jinja::Dict variables_;
  bool has_generation_blocks_ = false;
};

}  // namespace superoffload::data
