// The engine table: the one place that knows which engines exist, by name, in preference
// order. EngineOptions::validate(), ARBOR_ENGINE, Engine::create(), Engine::available(), the
// example's --engine flag and the parameterised tests all go through it.
//
// Adding an engine is one entry here (engine_table.cpp, under the platform's #if) and one
// `extern const EngineEntry` defined in the backend's own file.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "arbor/io/engine.hpp"

namespace arbor::io {

struct EngineEntry {
  /// What users type: ARBOR_ENGINE, --engine, EngineOptions::kind.
  std::string_view name;
  /// The io mode it runs in when EngineOptions::io_mode is unset (docs/benchmarks.md says why).
  IoMode io_mode;
  /// {} if the engine can run on this machine, else why not. Cheap: no threads, no scheduler.
  std::error_code (*probe)() noexcept;
  /// Creates and starts the engine. `announce`: log its one start-up line.
  Result<std::unique_ptr<Engine>> (*create)(sched::Scheduler& scheduler,
                                            const EngineOptions& options, bool announce);
};

/// Every engine built into this library, preferred first ("auto" tries them in this order).
std::span<const EngineEntry* const> engine_table() noexcept;
/// The entry called `name`, or nullptr.
const EngineEntry* find_engine(std::string_view name) noexcept;
/// For a backend's start-up line: "polled by the workers", "N poller thread(s)" or "a ring per
/// worker".
std::string describe_polling(const EngineOptions& options);

// The backends' entries (each defined in its backend's file).
extern const EngineEntry kEpollEngine;
extern const EngineEntry kUringEngine;
extern const EngineEntry kIocpEngine;
extern const EngineEntry kKqueueEngine;

}  // namespace arbor::io
