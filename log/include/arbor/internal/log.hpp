// Logging facade of arbor's own layers: one spdlog logger, "arbor", its level from ARBOR_LOG
// (trace|debug|info|warn|error|off; default warn: a library says nothing unless something needs
// attention or it is asked to). Used for start-up, configuration and failures, never on a
// per-operation hot path; start-up and configuration lines are info.
//
// Invariant: only arbor's own build sees this header. It belongs to no layer (io, runtime and
// http each link the log/ target privately), it is never installed, and no installed header
// includes it, so spdlog stays a private dependency: a program built against an installed
// arbor needs no spdlog headers. Programs using arbor (the examples among them) log through
// spdlog, or whatever they like, themselves.
#pragma once

#include <spdlog/spdlog.h>

#include <utility>

namespace arbor::log {

/// The logger, created on first use. An unknown ARBOR_LOG value logs a warning and keeps warn.
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

}  // namespace arbor::log
