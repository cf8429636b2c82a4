#include "common/engine_driver.hpp"

namespace arbor::io {

EngineDriver::EngineDriver(EngineCore& engine)
    : engine_(engine),
      events_(2 * engine.options().max_batch),
      fired_(engine.options().max_batch) {}

void EngineDriver::wait(std::int64_t timeout_ns) noexcept {
  reaped_ = engine_.reap(0, timeout_ns, events_, fired_);
}

void EngineDriver::dispatch() noexcept {
  const std::size_t n = reaped_;
  reaped_ = 0;
  engine_.deliver({events_.data(), n}, /*keep_first=*/true);
}

void EngineDriver::unpark() noexcept {
  engine_.wake(0);
}

}  // namespace arbor::io
