// Cancellation: how a task, and anything it awaits, learns that it should stop.
//
// Every task runs under a TaskContext whose std::stop_token means "stop": the runtime's
// (request_stop, shutdown), an abortable task's own (JoinHandle::abort), or a scope's
// (with_timeout, when_any, a task group). Scopes are linked to the context they were opened
// in, so stopping an outer one stops everything inside it, never the other way round. A
// cancelled wait completes promptly with std::errc::operation_canceled (as a Result error, or
// std::system_error from an awaitable that returns a plain value); the task then decides what
// to do, usually return. Nothing is destroyed from outside: a cancelled task runs to its end.
//
// The protocol for a cancellable awaitable (every awaitable arbor ships follows it; yield()
// is exempt because it waits for nothing):
//   1. In `template <class P> await_suspend(std::coroutine_handle<P> h)` (the promise type
//      says which task it is; a std::coroutine_handle<> does not, and does not compile):
//      `auto token = arbor::stop_token_of(h);` If
//      token.stop_requested(), do not suspend: complete with operation_canceled.
//   2. Register a std::stop_callback on the token (when token.stop_possible()) BEFORE making
//      the wait visible to whoever completes it: once visible, the completer may resume the
//      task on another thread, after which the awaiter must not be touched.
//   3. Exactly one of "completed" and "cancelled" resumes the task: decide under the lock
//      that guards the wait (or with one atomic exchange/CAS on the awaiter's state). The
//      callback may run before the wait is visible: record "cancelled" so that await_suspend,
//      which checks it under the same lock, does not suspend. The callback runs on whichever thread
//      requested stop (possibly inside the registration, possibly main()), so it must not resume
//      the task inline: it hands it to the workers with an arbor::Resumer (or, for a wait the
//      engine completes, cancels the engine operation, which then completes normally).
//   4. In await_resume, destroy the callback first (its destructor waits for a callback still
//      running on another thread), then return the result.
//   5. Be move-constructible until awaited: with_timeout and when_any move the awaitable into
//      a frame of their own. (Once suspended it is pinned: the callback points at it.)
// docs/guide.md has a complete example (a one-shot gate) and tests/runtime/cancel_test.cpp
// tests it.
//
// The root context: every plain-spawned task shares the runtime's token. Registering a
// callback on it locks its shared state, a lock every worker would contend for if each IO
// operation took it; so arbor's engine operations register nothing under it and the runtime's
// request_stop() cancels them through Engine::cancel_all() instead (TaskContext::
// engine_cancels). A user awaitable registers its callback as above, root or not: shutdown
// stops the root token, which runs it. Only engine operations take the shortcut.
#pragma once

#include <coroutine>
#include <stop_token>
#include <type_traits>

#include "arbor/runtime/join_handle.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/sched/work_item.hpp"

namespace arbor {

/// The stop token of the task behind `h` (what an awaitable's await_suspend calls). A
/// coroutine that is not an arbor task gets a token that never stops. `h` must keep its
/// promise type: write `template <class P> bool await_suspend(std::coroutine_handle<P> h)`.
template <class P>
requires(!std::is_void_v<P>) std::stop_token stop_token_of(std::coroutine_handle<P> h)
noexcept {
  return detail::context_of(h).token;
}
/// A type-erased handle no longer says which task it is: a compile error rather than a token
/// that silently never stops.
std::stop_token stop_token_of(std::coroutine_handle<> h) = delete;

/// The runtime the task behind `h` runs on, or nullptr outside one (same rule for `h`).
template <class P>
requires(!std::is_void_v<P>) Runtime* runtime_of(std::coroutine_handle<P> h) noexcept {
  return detail::context_of(h).runtime;
}
Runtime* runtime_of(std::coroutine_handle<> h) = delete;

/// Resumes a task on its runtime's workers, from any thread: what a stop callback (which runs
/// on whichever thread requested stop) or a foreign thread uses to wake a task. Embed one in
/// the awaiter; it must stay alive until the task has resumed (it does: the awaiter lives in
/// the suspended task's frame). If the workers are stopping, the task resumes at once, on the
/// calling thread, so that it can see its cancelled token and end.
class Resumer {
 public:
  Resumer() = default;
  Resumer(const Resumer&) = delete;
  Resumer& operator=(const Resumer&) = delete;

  /// Queues `task` to resume on `runtime`'s workers. One schedule() per suspension.
  void schedule(Runtime& runtime, std::coroutine_handle<> task) noexcept {
    item_.task = task;
    detail::submit_to_workers(runtime, item_);
  }

 private:
  struct Item : sched::WorkItem {
    Item() noexcept : sched::WorkItem(&run) {}
    static void run(sched::WorkItem* self, sched::Disposition) noexcept {
      static_cast<Item*>(self)->task.resume();
    }
    std::coroutine_handle<> task;
  };
  Item item_;
};

namespace this_task {

namespace detail {
// An awaitable that reads something from the awaiting task's context and never suspends.
template <class Read>
struct ContextRead {
  decltype(Read{}(arbor::detail::kNoContext)) value{};
  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    value = Read{}(arbor::detail::context_of(h));
    return false;  // continue at once: reading the context was all we suspended for
  }
  auto await_resume() noexcept { return std::move(value); }
};
struct ReadToken {
  std::stop_token operator()(const TaskContext& c) const noexcept { return c.token; }
};
struct ReadRuntime {
  Runtime* operator()(const TaskContext& c) const noexcept { return c.runtime; }
};
}  // namespace detail

/// `co_await this_task::stop_token()`: the running task's std::stop_token, without suspending.
/// Poll it in a loop that awaits nothing, or hand it to a thread or library that takes one.
inline detail::ContextRead<detail::ReadToken> stop_token() noexcept {
  return {};
}
/// `co_await this_task::runtime()`: the Runtime the task runs on (nullptr outside one).
inline detail::ContextRead<detail::ReadRuntime> runtime() noexcept {
  return {};
}

}  // namespace this_task

}  // namespace arbor
