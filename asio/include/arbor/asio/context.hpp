// Context: an Asio execution context over an arbor Runtime, so Asio code runs on arbor's
// workers with no io_context and no run() thread.
//
//   arbor::Runtime rt;
//   arbor::asio::Context ctx(rt);
//   boost::asio::post(ctx, [] { /* on one of rt's workers */ });
//   boost::asio::steady_timer timer(ctx);    // Asio I/O objects take it like an io_context
//   ctx.wait_idle();                         // like io_context::run(): until no work is left
//
// Ownership: the Context borrows the Runtime, which must outlive it. Destroying the Context
// shuts its Asio services down (their pending operations are destroyed, as io_context's
// are); handlers still queued in the runtime, and those of operations still pending (a
// Stream's read), are then destroyed without being called, when the workers reach them, the
// operation completes, or the runtime stops. Destroy it when none of its handlers is
// running (after wait_idle(), or after Runtime::shutdown()), as with io_context.
//
// The one Asio-internal thread: Boost.Asio (1.74) runs timers of a context that is not an
// io_context on a scheduler thread of its own, started by the first timer (steady_timer,
// and so websocket::stream and ssl::stream, which hold one). That thread only waits for
// deadlines; the handlers it completes still run on arbor's workers (through this executor).
#pragma once

#include <boost/asio/execution_context.hpp>
#include <cstdint>

#include "arbor/asio/detail/context_state.hpp"
#include "arbor/asio/executor.hpp"
#include "arbor/runtime/runtime.hpp"

namespace arbor::asio {

class Context : public boost::asio::execution_context {
 public:
  using executor_type = basic_executor<>;

  explicit Context(Runtime& runtime) : state_(new detail::ContextState(runtime)) {}
  ~Context() {
    shutdown();  // services first: their operations may hold tracked executors
    destroy();
    state_->close();
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  executor_type get_executor() noexcept { return executor_type(this, state_, {}, 0); }
  Runtime& runtime() const noexcept { return state_->runtime(); }

  /// Blocks the calling thread (not one of the runtime's workers) until no work is
  /// outstanding: no queued handler, no tracked executor (work guard, pending operation).
  /// What io_context::run() waits for, without running anything itself.
  void wait_idle() { state_->wait_idle(); }
  /// Outstanding work right now (racy while handlers run).
  std::int64_t outstanding_work() const noexcept { return state_->outstanding(); }

 private:
  detail::ContextState* state_;
};

}  // namespace arbor::asio
