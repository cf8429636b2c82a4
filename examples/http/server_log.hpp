// The HTTP example server's log: a spdlog logger of its own, "http_server". The example is a
// program using arbor, and arbor's logger is private to arbor's build; it logs the way any
// such program may, through spdlog directly.
//
// Its lines go to stderr, since stdout's first line ("listening on ...") is what scripts and
// tests read, and a set ARBOR_LOG applies to it as to arbor's logger, so one variable quiets
// both (perf/ starts the server with ARBOR_LOG=warn). Unset, the two differ on purpose: arbor,
// a library, is quiet (warn), while this program logs at info, the way a server reports its own
// start-up and the signals it ignores. A value spdlog does not know is left for arbor's logger
// to report; this one keeps info.
#pragma once

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>
#include <string_view>

namespace arbor::example {

inline spdlog::logger& server_log() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("http_server");
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [http_server] [%l] %v");
    if (const char* v = std::getenv("ARBOR_LOG"); v != nullptr && *v != '\0') {
      const auto level = spdlog::level::from_str(v);
      if (level != spdlog::level::off || std::string_view(v) == "off") l->set_level(level);
    }
    return l;
  }();
  return *logger;
}

}  // namespace arbor::example
