// ReadyOrTask: an awaitable that completes without suspending, and without a coroutine frame,
// when its result is already at hand, and runs a Task otherwise.
//
// Why: a buffered reader mostly finds the next line already in its buffer; making a Task for
// each of those (a frame from the pool, a start, a return) cost the reader three quarters of
// its speed against a hand-written loop (docs/benchmarks.md, "Buffered lines"). The frame is
// now made only when the reader has to wait for the stream.
//
// Invariant: nothing happens before the awaitable is awaited (like a Task, it is lazy: made and
// dropped unawaited, it consumed nothing), and it is awaited once. `Op` supplies
// `std::optional<T> try_now()` (the result if it needs no waiting; it may consume) and
// `Task<T> wait()` (the full operation, run only when try_now() gave nothing). Cancellation is
// the Task's: an awaitable that completes at once never waits, so there is nothing to cancel.
// Move-constructible until awaited, so with_timeout and when_any can take it.
#pragma once

#include <coroutine>
#include <optional>
#include <utility>

#include "arbor/runtime/task.hpp"

namespace arbor::detail {

template <class T, class Op>
class [[nodiscard]] ReadyOrTask {
 public:
  explicit ReadyOrTask(Op op) noexcept : op_(std::move(op)) {}
  ReadyOrTask(ReadyOrTask&&) noexcept = default;
  ReadyOrTask(const ReadyOrTask&) = delete;
  ReadyOrTask& operator=(const ReadyOrTask&) = delete;

  bool await_ready() {
    ready_ = op_.try_now();
    return ready_.has_value();
  }
  // Whatever Task's awaiter returns (a handle to transfer to, or whether to stay suspended:
  // task.hpp's ARBOR_TASK_TAIL_CALLS): it starts the task in our context.
  template <class P>
  auto await_suspend(std::coroutine_handle<P> h) {
    task_.emplace(op_.wait());
    awaiter_.emplace(std::move(*task_).operator co_await());
    return awaiter_->await_suspend(h);
  }
  T await_resume() { return ready_ ? std::move(*ready_) : awaiter_->await_resume(); }

 private:
  Op op_;
  std::optional<T> ready_;
  std::optional<Task<T>> task_;  // owns the frame until this awaitable goes
  std::optional<typename Task<T>::Awaiter> awaiter_;
};

}  // namespace arbor::detail
