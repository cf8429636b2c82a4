// Logging: arbor's one spdlog logger ("arbor"), level from ARBOR_LOG
// (trace|debug|info|warn|error|off; default info). Used for start-up, configuration and
// failures — never on a per-operation hot path.
//
// Private to arbor's own build (io/internal is not installed): the layers above io and the
// examples use it, but no installed header includes it, so a program built against an installed
// arbor needs no spdlog headers.
#pragma once

#include <spdlog/spdlog.h>

namespace arbor::io::log {

/// The logger, created on first use. An unknown ARBOR_LOG value logs a warning and keeps info.
spdlog::logger& logger();

template <class... Args>
void info(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger().info(fmt, std::forward<Args>(args)...);
}
template <class... Args>
void warn(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger().warn(fmt, std::forward<Args>(args)...);
}
template <class... Args>
void error(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger().error(fmt, std::forward<Args>(args)...);
}
template <class... Args>
void debug(spdlog::format_string_t<Args...> fmt, Args&&... args) {
  logger().debug(fmt, std::forward<Args>(args)...);
}

}  // namespace arbor::io::log
