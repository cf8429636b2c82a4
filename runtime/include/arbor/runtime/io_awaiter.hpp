// IoAwaiter: how a task waits for one engine Operation.
//
// Ownership: the awaiter holds the Operation (both live in the awaiting frame; the operation's
// `context` points back at the awaiter) and names its socket by {descriptor, generation}; built
// before its socket was closed, it completes with operation_canceled rather than run on whatever
// socket the descriptor serves by then.
//
// Cancellation follows cancel.hpp's protocol: await_suspend registers a stop_callback on the task's
// stop_token first, then starts the operation. If the token fires before the start, the engine sees
// cancel_requested and finishes the operation inline with -ECANCELED; if it fires while the
// operation is pending, the engine completes it early. Under the runtime's own token no callback is
// registered: Runtime::request_stop() cancels through Engine::cancel_all() instead (see
// TaskContext). Once start() reports "pending", the completion may resume the task on another
// worker immediately, so nothing touches the awaiter after that.
#pragma once

#include <coroutine>
#include <cstddef>
#include <optional>
#include <stop_token>

#include "arbor/io/engine.hpp"
#include "arbor/io/operation.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor::detail {

class IoAwaiter {
 public:
  IoAwaiter(io::Engine* engine, io::DescriptorRef socket, io::OpKind kind, void* buffer = nullptr,
            std::size_t length = 0, Address* address = nullptr) noexcept
      : engine_(engine) {
    op_.target(socket);
    op_.kind = kind;
    op_.data = buffer;
    op_.size = length;
    op_.address = address;
    op_.context = this;
  }
  /// Only before it is awaited (e.g. into with_timeout's frame): a started operation is pinned.
  IoAwaiter(IoAwaiter&& other) noexcept : engine_(other.engine_) {
    op_.descriptor = other.op_.descriptor;
    op_.generation = other.op_.generation;
    op_.kind = other.op_.kind;
    op_.data = other.op_.data;
    op_.size = other.op_.size;
    op_.address = other.op_.address;
    op_.context = this;
  }
  IoAwaiter(const IoAwaiter&) = delete;
  IoAwaiter& operator=(const IoAwaiter&) = delete;

  /// The operation as the engine sees it (for diagnostics and tests).
  const io::Operation& operation() const noexcept { return op_; }

  bool await_ready() noexcept {
    if (op_.descriptor != nullptr) return false;
    op_.result = -EBADF;  // the socket is closed (or was never opened)
    return true;
  }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    handle_ = h;
    op_.complete = &on_complete;
    const TaskContext& ctx = context_of(h);
    if (ctx.token.stop_requested()) {  // a plain load: cheap even on the shared root token
      op_.result = -ECANCELED;
      return false;
    }
    if (ctx.needs_callback()) cancel_.emplace(ctx.token, Canceller{this});
    return !engine_->start(op_);
  }

 protected:
  /// The raw result (>= 0 or -errno); drops the stop_callback first (it may be running on
  /// the thread that requested stop, in which case this waits for it to return).
  std::int64_t finish() noexcept {
    cancel_.reset();
    return op_.result;
  }

 private:
  struct Canceller {
    IoAwaiter* self;
    void operator()() const noexcept { self->engine_->cancel(self->op_); }
  };
  static void on_complete(io::Operation& op, std::int64_t r) noexcept {
    auto& self = *static_cast<IoAwaiter*>(op.context);
    op.result = r;
    self.handle_.resume();
  }

  io::Operation op_;
  io::Engine* engine_;
  std::coroutine_handle<> handle_;
  std::optional<std::stop_callback<Canceller>> cancel_;
};

/// `co_await` gives Result<std::size_t>: bytes moved.
class TransferAwaiter : public IoAwaiter {
 public:
  using IoAwaiter::IoAwaiter;
  Result<std::size_t> await_resume() noexcept {
    const std::int64_t r = finish();
    if (r < 0) return errno_code(static_cast<int>(r));
    return static_cast<std::size_t>(r);
  }
};

/// `co_await` gives Result<void>.
class StatusAwaiter : public IoAwaiter {
 public:
  using IoAwaiter::IoAwaiter;
  Result<void> await_resume() noexcept {
    const std::int64_t r = finish();
    if (r < 0) return errno_code(static_cast<int>(r));
    return {};
  }
};

/// `co_await` gives Result<io::Handle>: an accepted socket, not yet attached.
class AcceptAwaiter : public IoAwaiter {
 public:
  using IoAwaiter::IoAwaiter;
  Result<io::Handle> await_resume() noexcept {
    const std::int64_t r = finish();
    if (r < 0) return errno_code(static_cast<int>(r));
    return static_cast<io::Handle>(r);
  }
};

}  // namespace arbor::detail
