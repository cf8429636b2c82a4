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
//   1. In await_suspend(h): `auto token = arbor::stop_token_of(h);` If
//      token.stop_requested(), do not suspend: complete with operation_canceled.
//   2. Register a std::stop_callback on the token (when token.stop_possible()) BEFORE making
//      the wait visible to whoever completes it: once visible, the completer may resume the
//      task on another thread, after which the awaiter must not be touched.
//   3. Exactly one of "completed" and "cancelled" resumes the task: decide with one atomic
//      exchange/CAS on the awaiter's state. The callback runs on whichever thread requested
//      stop (possibly inside the registration, possibly main()), so it must not resume the task
//      inline: it hands it to the workers with arbor::resume_on_workers (or, for a wait the
//      engine completes, cancels the engine operation, which then completes normally).
//   4. In await_resume, destroy the callback first (its destructor waits for a callback still
//      running on another thread), then return the result.
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

#include "arbor/runtime/join_handle.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/sched/work_item.hpp"

namespace arbor {

/// The stop token of the task behind `h` (what an awaitable's await_suspend calls). A
/// coroutine that is not an arbor task gets a token that never stops.
template <class P>
std::stop_token stop_token_of(std::coroutine_handle<P> h) noexcept {
  return detail::context_of(h).token;
}

/// The runtime the task behind `h` runs on, or nullptr outside one.
template <class P>
Runtime* runtime_of(std::coroutine_handle<P> h) noexcept {
  return detail::context_of(h).runtime;
}

/// Queues `item` to run on `runtime`'s workers: how a stop callback (or any thread that is not
/// a worker) wakes a task. `item` must stay alive until it has run; if the workers are
/// stopping it runs at once, on this thread, as Disposition::dropped.
inline void resume_on_workers(Runtime& runtime, sched::WorkItem& item) noexcept {
  detail::submit_to_workers(runtime, item);
}

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
