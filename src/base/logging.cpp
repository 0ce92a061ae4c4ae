// Boost.Log set-up: a console sink (rank 0, plus errors from every rank) and a per-rank file.
#include "base/logging.hpp"

#include <atomic>
#include <iostream>
#include <mutex>

#include <boost/core/null_deleter.hpp>
#include <boost/log/attributes/mutable_constant.hpp>
#include <boost/log/core.hpp>
#include <boost/log/expressions.hpp>
#include <boost/log/sinks/sync_frontend.hpp>
#include <boost/log/sinks/text_ostream_backend.hpp>
#include <boost/log/sources/record_ostream.hpp>
#include <boost/log/sources/severity_logger.hpp>
#include <boost/log/support/date_time.hpp>
#include <boost/log/utility/setup/common_attributes.hpp>
#include <boost/smart_ptr/make_shared_object.hpp>
#include <fstream>

namespace superoffload::log {
// Found by Boost.Log's formatter through argument-dependent lookup.
std::ostream& operator<<(std::ostream& os, Level level) {
  static constexpr const char* padded[] = {"TRACE  ", "DEBUG  ", "INFO   ", "WARNING", "ERROR  ", "FATAL  "};
  return os << padded[static_cast<int>(level)];
}

namespace {

namespace bl = boost::log;
namespace expr = boost::log::expressions;
using TextSink = bl::sinks::synchronous_sink<bl::sinks::text_ostream_backend>;

BOOST_LOG_ATTRIBUTE_KEYWORD(severity_kw, "Severity", Level)
BOOST_LOG_ATTRIBUTE_KEYWORD(rank_kw, "Rank", int)

std::atomic<Level> g_level{Level::info};
std::atomic<int> g_rank{0};
std::atomic<bool> g_console_all{false};
std::mutex g_setup_mutex;
// One attribute whose value changes when the rank becomes known (Boost.Log keeps the first
// attribute registered under a name, so it is updated rather than re-added).
bl::attributes::mutable_constant<int> g_rank_attribute(0);
boost::shared_ptr<TextSink> g_console;
boost::shared_ptr<TextSink> g_file;

bl::sources::severity_logger_mt<Level>& logger() {
  static bl::sources::severity_logger_mt<Level> instance;
  return instance;
}

// Same layout in every sink: "2026-11-22 10:00:00.123 [rank 0] INFO    message".
auto make_formatter() {
  return expr::stream << expr::format_date_time<boost::posix_time::ptime>("TimeStamp", "%Y-%m-%d %H:%M:%S.%f")
                      << " [rank " << rank_kw << "] " << severity_kw << " " << expr::smessage;
}

}  // namespace

std::optional<Level> parse_level(std::string_view text) {
  if (text == "trace") return Level::trace;
  if (text == "debug") return Level::debug;
  if (text == "info") return Level::info;
  if (text == "warning" || text == "warn") return Level::warning;
  if (text == "error") return Level::error;
  if (text == "fatal") return Level::fatal;
  return std::nullopt;
}

std::string_view level_name(Level level) {
  static constexpr std::string_view names[] = {"trace", "debug", "info", "warning", "error", "fatal"};
  return names[static_cast<int>(level)];
}

void init(Level level) {
  std::lock_guard lock(g_setup_mutex);
  g_level = level;
  if (g_console) return;
  auto core = bl::core::get();
  bl::add_common_attributes();
  core->add_global_attribute("Rank", g_rank_attribute);
  auto backend = boost::make_shared<bl::sinks::text_ostream_backend>();
  // stderr keeps stdout clean for command output (config, version) that users pipe.
  backend->add_stream(boost::shared_ptr<std::ostream>(&std::clog, boost::null_deleter()));
  backend->auto_flush(true);
  g_console = boost::make_shared<TextSink>(backend);
  g_console->set_formatter(make_formatter());
  g_console->set_filter([](const bl::attribute_value_set& values) {
    auto sev = values[severity_kw];
    if (!sev || *sev < g_level.load()) return false;
    return g_console_all.load() || g_rank.load() == 0 || *sev >= Level::error;
  });
  core->add_sink(g_console);
}

void set_rank(int rank, Console console) {
  std::lock_guard lock(g_setup_mutex);
  g_rank = rank;
  g_console_all = console == Console::all;
  g_rank_attribute.set(rank);
}

void set_level(Level level) { g_level = level; }

void add_rank_file(const std::filesystem::path& dir, int rank) {
  std::lock_guard lock(g_setup_mutex);
  if (g_file) return;
  std::filesystem::create_directories(dir);
  const auto path = dir / ("rank_" + std::to_string(rank) + ".log");
  auto stream = boost::make_shared<std::ofstream>(path, std::ios::app);
  if (!*stream) {
    std::clog << "superoffload: cannot open log file " << path << "; logging to the console only\n";
    return;
  }
  auto backend = boost::make_shared<bl::sinks::text_ostream_backend>();
  backend->add_stream(stream);
  backend->auto_flush(true);  // the last lines before a crash are the ones that matter
  g_file = boost::make_shared<TextSink>(backend);
  g_file->set_formatter(make_formatter());
  g_file->set_filter([](const bl::attribute_value_set& values) {
    auto sev = values[severity_kw];
    return sev && *sev >= g_level.load();
  });
  bl::core::get()->add_sink(g_file);
}

void flush() { bl::core::get()->flush(); }

bool enabled(Level level) { return level >= g_level.load(); }

void write(Level level, const std::string& message) {
  if (!g_console) init(g_level.load());
  BOOST_LOG_SEV(logger(), level) << message;
}

}  // namespace superoffload::log
