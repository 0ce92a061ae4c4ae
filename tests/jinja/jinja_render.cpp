// The engine from the command line, for tests/jinja/jinja_parity.py: renders each case of a
// JSON list [{"template": ..., "variables": {...}}] and prints a JSON list of
// {"text": ..., "generation": [[begin, end], ...]} or {"error": ..., "raised": bool}; an exception
// that is not the engine's own error is reported with "escaped": true, so a test sees it.
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "jinja/template.hpp"

namespace j = superoffload::jinja;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: jinja_render CASES.json\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  const auto cases = nlohmann::ordered_json::parse(in);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& c : cases) {
    try {
      j::TemplateOptions options;
      if (c.contains("max_steps")) options.max_steps = c.at("max_steps").get<int64_t>();
      const j::Template t(c.at("template").get<std::string>(), "case", options);
      const auto rendered = t.render(c.value("variables", nlohmann::ordered_json::object()));
      out.push_back({{"text", rendered.text}, {"generation", rendered.generation}});
    } catch (const j::RaisedException& e) {
      out.push_back({{"error", e.what()}, {"raised", true}});
    } catch (const j::TemplateError& e) {
      out.push_back({{"error", e.what()}, {"raised", false}});
    } catch (const std::exception& e) {  // the engine let something else escape: a bug parity reports
      out.push_back({{"error", std::string("not a TemplateError: ") + e.what()}, {"raised", false}, {"escaped", true}});
    }
  }
  std::cout << out.dump() << "\n";
  return 0;
}
