// The one definition of the facade's logger (log/include/arbor/internal/log.hpp). Compiled once,
// into arbor_io (log/CMakeLists.txt says why there), so a program has one "arbor" logger
// however many layers log: spdlog refuses a second logger of the same name.
#include "arbor/internal/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string_view>

namespace arbor::log {

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("arbor");
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [arbor] [%l] %v");
    // A library is quiet unless asked: by default only what needs attention (warnings and
    // errors) reaches a program's stderr; its engine and start-up lines are ARBOR_LOG=info's.
    l->set_level(spdlog::level::warn);
    if (const char* v = std::getenv("ARBOR_LOG"); v != nullptr && *v != '\0') {
      const auto level = spdlog::level::from_str(v);
      // from_str maps unknown text to off; only accept "off" when it was asked for.
      if (level == spdlog::level::off && std::string_view(v) != "off")
        l->warn("ARBOR_LOG='{}' is not one of trace|debug|info|warn|error|off; using warn", v);
      else
        l->set_level(level);
    }
    return l;
  }();
  return *instance;
}

}  // namespace arbor::log
