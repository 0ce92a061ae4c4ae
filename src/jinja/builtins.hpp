// What a chat template may call besides its own macros: jinja2's filters and tests, the
// methods of str and dict that templates use, and the globals HF adds (raise_exception,
// strftime_now) with range and namespace. Errors are thrown as TemplateError without a
// position; the renderer adds the template's line and column.
#pragma once

#include <string>
#include <vector>

#include "jinja/value.hpp"

namespace superoffload::jinja {

// `input | name(args)`. Throws for an unknown filter, naming it.
Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
// `input is name(args)`. Throws for an unknown test, naming it.
bool apply_test(const std::string& name, const Value& input, const std::vector<Value>& args);
// `object.name` where it is a method (str.strip, dict.items, ...), bound to `object`; Undefined otherwise.
Value method(const Value& object, const std::string& name);
// Whether `object.name` of a dict is one of its methods (items, get, ...), which jinja2 finds
// before an entry of that name.
bool is_dict_method(const std::string& name);
// range, namespace, dict, raise_exception, strftime_now.
Dict globals();

// Python's str semantics over UTF-8 code points: len(), indexing and slicing.
std::vector<std::string> code_points(const std::string& text);

}  // namespace superoffload::jinja
