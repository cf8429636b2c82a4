// Gate: a one-shot, one-waiter event written the way docs/guide.md tells users to write a
// cancellable awaitable (cancel.hpp's protocol), with nothing from arbor::detail. The tests
// use it as "an awaitable arbor knows nothing about".
#pragma once

#include <mutex>
#include <optional>
#include <stop_token>
#include <system_error>

#include "arbor/arbor.hpp"

namespace arbor::test {

class Gate {
 public:
  /// Opens the gate (from any thread): the waiter, if any, completes with success.
  void open() {
    Waiter* w = nullptr;
    {
      std::lock_guard lock(mutex_);
      open_ = true;
      w = std::exchange(waiter_, nullptr);  // taking it under the lock decides who resumes it
    }
    if (w != nullptr) w->wake({});
  }

  class Waiter {
   public:
    explicit Waiter(Gate& gate) : gate_(gate) {}
    // 5. Movable until awaited (with_timeout and when_any move it into their own frame).
    Waiter(Waiter&& other) noexcept : gate_(other.gate_) {}
    bool await_ready() const noexcept { return false; }
    template <class P>  // the promise type says which task: a coroutine_handle<> would not
    bool await_suspend(std::coroutine_handle<P> h) {
      std::stop_token token = stop_token_of(h);  // 1. the task's token
      if (token.stop_requested()) {
        result_ = std::make_error_code(std::errc::operation_canceled);
        return false;
      }
      handle_ = h;
      runtime_ = runtime_of(h);
      // 2. the callback before we are visible to open(): it may run right here, inline.
      if (token.stop_possible()) cancel_.emplace(std::move(token), Cancel{this});
      std::lock_guard lock(gate_.mutex_);
      if (cancelled_) {
        result_ = std::make_error_code(std::errc::operation_canceled);
        return false;
      }
      if (gate_.open_) return false;
      gate_.waiter_ = this;  // from here on, open() or the callback resumes us
      return true;
    }
    Result<void> await_resume() {
      cancel_.reset();  // 4. first: waits for a callback running on another thread
      return result_;
    }

   private:
    friend class Gate;
    struct Cancel {
      Waiter* self;
      void operator()() const noexcept { self->on_stop(); }
    };
    void on_stop() noexcept {
      bool mine = false;
      {
        std::lock_guard lock(gate_.mutex_);
        cancelled_ = true;
        if (gate_.waiter_ == this) {  // 3. still waiting: we take it, open() no longer can
          gate_.waiter_ = nullptr;
          mine = true;
        }
      }
      if (mine) wake(std::make_error_code(std::errc::operation_canceled));
    }
    void wake(Result<void> result) noexcept {
      result_ = result;
      resumer_.schedule(*runtime_, handle_);  // never inline: we may be on any thread
    }

    Gate& gate_;
    std::coroutine_handle<> handle_;
    Runtime* runtime_ = nullptr;
    Resumer resumer_;
    Result<void> result_;
    bool cancelled_ = false;  // guarded by gate_.mutex_
    std::optional<std::stop_callback<Cancel>> cancel_;
  };

  /// `co_await gate.wait()`: Result<void>; operation_canceled if the task is cancelled first.
  Waiter wait() { return Waiter(*this); }

 private:
  std::mutex mutex_;
  bool open_ = false;
  Waiter* waiter_ = nullptr;
};

}  // namespace arbor::test
