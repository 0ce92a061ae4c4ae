// Python's str.upper, lower, capitalize and title over all of Unicode (ICU), not ASCII only:
// chat templates upper-case role names and users write in every script.
#pragma once

#include <string>

namespace superoffload::jinja {

std::string unicode_upper(const std::string& text);
std::string unicode_lower(const std::string& text);
// First character in title case, the rest lower case.
std::string unicode_capitalize(const std::string& text);
// Title case after every character that is not a letter, lower case after one that is.
std::string unicode_title(const std::string& text);

}  // namespace superoffload::jinja
