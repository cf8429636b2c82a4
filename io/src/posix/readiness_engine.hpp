// The readiness engine: the protocol every readiness backend runs (try the system call, park on
// EAGAIN, retry on readiness; posix/readiness_engine.cpp), over the ReadinessPoller an adapter
// makes (linux/epoll_engine.cpp, bsd/kqueue_engine.cpp). An adapter's whole engine is its
// poller class and one engine-table entry built from the templates below, so no two adapters
// repeat the glue either.
#pragma once

#include <memory>

#include "arbor/io/engine.hpp"
#include "posix/readiness_poller.hpp"

namespace arbor::io {

/// Builds and starts a readiness engine called `name` whose poll sets `make` creates (one per
/// poller thread, or one in workers mode). `announce`: log its one start-up line. The engine
/// owns the pollers; the caller owns the engine.
Result<std::unique_ptr<Engine>> create_readiness_engine(const char* name, MakeReadinessPoller make,
                                                        sched::Scheduler& scheduler,
                                                        const EngineOptions& options,
                                                        bool announce);

// An adapter's poller P derives from ReadinessPoller and has: `static constexpr const char*
// kName` (the engine's name), a constructor taking its capacity (reports per wait), and
// `int init() noexcept` making its kernel objects (0 or an errno value; the destructor closes
// whatever it made).

/// P made and initialised (MakeReadinessPoller).
template <class P>
Result<std::unique_ptr<ReadinessPoller>> make_readiness_poller(std::size_t capacity) {
  auto poller = std::make_unique<P>(capacity);
  if (const int e = poller->init(); e != 0) return errno_code(e);
  return std::unique_ptr<ReadinessPoller>(std::move(poller));
}

/// The engine-table probe: whether a P can be made here (made, then dropped).
template <class P>
std::error_code probe_readiness() noexcept {
  P poller(0);
  const int e = poller.init();
  return e != 0 ? errno_code(e) : std::error_code{};
}

/// The engine-table create(): the readiness engine over P pollers.
template <class P>
Result<std::unique_ptr<Engine>> create_readiness(sched::Scheduler& scheduler,
                                                 const EngineOptions& options, bool announce) {
  return create_readiness_engine(P::kName, &make_readiness_poller<P>, scheduler, options, announce);
}

}  // namespace arbor::io
