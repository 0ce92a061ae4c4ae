// Rank-aware logging on Boost.Log: `SO_LOG(info) << ...`. Boost stays inside logging.cpp so
// that logging costs other translation units nothing to compile.
#pragma once

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace superoffload::log {

enum class Level { trace, debug, info, warning, error, fatal };

// "trace" … "fatal" (also "warn"); nullopt for anything else.
std::optional<Level> parse_level(std::string_view text);
std::string_view level_name(Level level);

// Which ranks write to the console: rank 0 only (default), or all of them. Errors and
// fatal messages reach stderr from every rank regardless.
enum class Console { rank0, all };

// Console sink; call once, as early as possible (before MPI is up, rank is 0).
void init(Level level);
// Once the rank is known: tag lines with it and restrict the console.
void set_rank(int rank, Console console);
void set_level(Level level);
// Every rank's full log: <dir>/rank_<N>.log (appended, so a resumed job keeps its history).
void add_rank_file(const std::filesystem::path& dir, int rank);
void flush();

bool enabled(Level level);
void write(Level level, const std::string& message);

// One log line, written when it goes out of scope.
class Line {
 public:
  explicit Line(Level level) : level_(level) {}
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  ~Line() { write(level_, text_.str()); }
  template <class T>
  Line& operator<<(const T& value) {
    text_ << value;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream text_;
};

}  // namespace superoffload::log

// A one-pass loop rather than if/else, so `if (x) SO_LOG(info) << …;` has no dangling else;
// the message is only formatted when the level is enabled.
#define SO_LOG(level)                                                                     \
  for (bool so_log_once_ = ::superoffload::log::enabled(::superoffload::log::Level::level); \
       so_log_once_; so_log_once_ = false)                                                \
  ::superoffload::log::Line(::superoffload::log::Level::level)
