// Task<T>: a lazy coroutine that produces a T (or throws), awaited exactly once.
//
// - Lazy: nothing runs until the task is awaited (or spawned); a Task that is never awaited
//   destroys its frame without running it.
// - Move-only and awaited once: `co_await std::move(task)`; awaiting an lvalue does not
//   compile, so a task cannot be awaited twice by accident.
// - No stack growth for tasks that complete without waiting, in any build: a loop awaiting a
//   million such tasks runs in constant stack. Where the compiler turns symmetric transfer
//   into tail calls (optimised builds without a sanitizer: ARBOR_TASK_TAIL_CALLS, below),
//   starting a child and returning to the parent are tail calls, so deep nesting (a task
//   awaiting a task awaiting a task...) is flat too. Elsewhere (-O0 Debug, ASan, TSan) a
//   symmetric transfer is a plain call, and a loop of them overflowed the stack; there the
//   child starts inside the awaiter's await_suspend and, if it ends before that returns, the
//   parent simply goes on (await_suspend returns false): the loop stays flat, and nesting
//   uses a frame per level, as nested function calls do.
// - Exceptions thrown in the task are rethrown from co_await in the awaiter.
// - Context: each task carries a pointer to a TaskContext (its Runtime and the stop_token
//   that cancels its IO); an awaited task inherits its awaiter's. Only a pointer is copied:
//   the context lives in the runtime, an abortable task's frame, or a scope's frame
//   (with_timeout, when_any, a task group), each of which outlives every task run under it.
//   cancel.hpp has the public side: this_task::stop_token(), stop_token_of(h).
// - Frames come from frame_pool (per-thread size-class caches) unless ARBOR_POOL_FRAMES=0.
#pragma once

#include <atomic>
#include <coroutine>
#include <exception>
#include <stop_token>
#include <type_traits>
#include <utility>
#include <variant>

#include "arbor/runtime/frame_pool.hpp"

// 1 where symmetric transfer compiles to a tail call: optimised, no sanitizer (they keep the
// calls). A program may define it to 0 to force the other way (correct everywhere, with a
// frame per nesting level); 1 where the compiler does not make the tail calls (GCC at -O1 or
// -Og) lets a long loop of tasks that complete at once grow the stack.
#ifndef ARBOR_TASK_TAIL_CALLS
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ARBOR_DETAIL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define ARBOR_DETAIL_SANITIZED 1
#endif
#endif
#if defined(__OPTIMIZE__) && !defined(ARBOR_DETAIL_SANITIZED)
#define ARBOR_TASK_TAIL_CALLS 1
#else
#define ARBOR_TASK_TAIL_CALLS 0
#endif
#endif

namespace arbor {

class Runtime;

struct TaskContext {
  Runtime* runtime = nullptr;
  std::stop_token token;
  /// True for the runtime's own context: stopping it also runs Engine::cancel_all(), so an
  /// operation under it needs no stop_callback of its own. That matters because every task
  /// shares this token, and registering a callback locks the token's shared state: one
  /// contended lock per operation across all workers.
  bool engine_cancels = false;

  /// Whether an operation under this context must register a stop_callback to be cancelled.
  bool needs_callback() const noexcept { return !engine_cancels && token.stop_possible(); }
};

namespace detail {

inline const TaskContext kNoContext{};

/// A cancellation scope: a context with a stop_source of its own, linked to the context it was
/// opened under, so stopping the outer one stops it (never the other way round). What
/// with_timeout, when_any, task groups and abortable tasks run their tasks under. Registering
/// the link locks the outer token's shared state once per scope, never once per operation.
/// Pinned (the link points at it); it must outlive every task run under context().
class StopScope {
 public:
  explicit StopScope(const TaskContext& outer)
      : context_{outer.runtime, source_.get_token(), false},
        link_(outer.token, Forward{&source_}) {}
  StopScope(const StopScope&) = delete;
  StopScope& operator=(const StopScope&) = delete;

  const TaskContext& context() const noexcept { return context_; }
  /// Cancels every task under context(); thread-safe, idempotent.
  void request_stop() noexcept { source_.request_stop(); }
  bool stop_requested() const noexcept { return source_.stop_requested(); }

 private:
  struct Forward {
    std::stop_source* source;
    void operator()() const noexcept { source->request_stop(); }
  };
  std::stop_source source_;
  TaskContext context_;
  std::stop_callback<Forward> link_;  // last: it may fire at once, and needs source_ built
};

class PromiseBase {
 public:
  static void* operator new(std::size_t size) { return frame_pool::allocate(size); }
  static void operator delete(void* frame, std::size_t size) noexcept {
    frame_pool::deallocate(frame, size);
  }

  const TaskContext& context() const noexcept { return *context_; }
  void inherit(const TaskContext* parent) noexcept {
    if (!context_set_) context_ = parent;
  }
  void set_context(const TaskContext* context) noexcept {
    context_ = context;
    context_set_ = true;
  }

  std::coroutine_handle<> continuation = std::noop_coroutine();
  // The awaiter has let go: the task's end resumes `continuation`. Set before the start where
  // the start is a tail call; otherwise the awaiter and the task's end each exchange it, and
  // whichever comes second carries the parent on (the awaiter by not suspending, the end by
  // resuming it). A task on its own (never awaited) ends with it false and resumes nothing.
  std::atomic<bool> handed_over{false};

 private:
  const TaskContext* context_ = &kNoContext;
  bool context_set_ = false;
};

/// The context of the coroutine behind `h`, or the empty one for foreign coroutine types.
template <class P>
const TaskContext& context_of(std::coroutine_handle<P> h) noexcept {
  if constexpr (std::is_base_of_v<PromiseBase, P>)
    return h.promise().context();
  else
    return kNoContext;
}

/// `co_await CurrentContext{}` yields the running task's context without suspending.
struct CurrentContext {
  const TaskContext* context = &kNoContext;
  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    context = &context_of(h);
    return false;
  }
  const TaskContext& await_resume() const noexcept { return *context; }
};

struct FinalAwaiter {
  bool await_ready() const noexcept { return false; }
  template <class P>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
    auto& p = h.promise();
    // The load first: where the awaiter handed over before the start, no locked instruction.
    // Acquire (and acq_rel): the awaiter's writes before its hand-over come before our resume
    // of it; release: ours come before it goes on without suspending.
    if (p.handed_over.load(std::memory_order_acquire) ||
        p.handed_over.exchange(true, std::memory_order_acq_rel))
      return p.continuation;       // the awaiter, or noop for a root
    return std::noop_coroutine();  // ended inside the awaiter's start: the awaiter goes on
  }
  void await_resume() const noexcept {}
};

template <class T>
class TaskPromise : public PromiseBase {
 public:
  std::suspend_always initial_suspend() const noexcept { return {}; }
  FinalAwaiter final_suspend() const noexcept { return {}; }
  void unhandled_exception() noexcept { result_.template emplace<2>(std::current_exception()); }
  std::exception_ptr take_error() noexcept {
    std::exception_ptr error = std::move(std::get<2>(result_));
    result_.template emplace<0>();
    return error;
  }
  template <class U>
  void return_value(U&& value) {
    result_.template emplace<1>(std::forward<U>(value));
  }
  // Awaited once, so the exception moves out: the frame keeps no reference to it. Otherwise
  // the last reference could go with the frame, on whichever thread destroys it, after the
  // awaiter on another thread was told the task is done (a spawned root's frame is destroyed
  // after its joiner is woken): a race on the exception object as far as ThreadSanitizer can
  // see, since libstdc++'s reference counts are not instrumented
  // (TaskGroup.CancelOnErrorCancelsTheSiblingsAndRethrows under TSan found it).
  T take() {
    if (result_.index() == 2) std::rethrow_exception(take_error());
    return std::move(std::get<1>(result_));
  }

 private:
  std::variant<std::monostate, T, std::exception_ptr> result_;
};

template <>
class TaskPromise<void> : public PromiseBase {
 public:
  std::suspend_always initial_suspend() const noexcept { return {}; }
  FinalAwaiter final_suspend() const noexcept { return {}; }
  void unhandled_exception() noexcept { error_ = std::current_exception(); }
  void return_void() const noexcept {}
  void take() {  // the exception moves out, as TaskPromise<T>::take() says why
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  std::exception_ptr error_;
};

}  // namespace detail

template <class T = void>
class [[nodiscard]] Task {
 public:
  struct promise_type : detail::TaskPromise<T> {
    Task get_return_object() noexcept {
      return Task(std::coroutine_handle<promise_type>::from_promise(*this));
    }
  };
  using value_type = T;
  using handle_type = std::coroutine_handle<promise_type>;

  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (handle_) handle_.destroy();
  }

  /// False after the task was moved from.
  bool valid() const noexcept { return static_cast<bool>(handle_); }

  struct Awaiter {
    handle_type handle;
    bool await_ready() const noexcept { return false; }
#if ARBOR_TASK_TAIL_CALLS
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> parent) noexcept {
      auto& promise = handle.promise();
      promise.continuation = parent;
      promise.inherit(&detail::context_of(parent));
      // Relaxed: the child's end runs after its start on this thread, or on another thread
      // that the scheduler's hand-off (a release/acquire pair) ordered after it.
      promise.handed_over.store(true, std::memory_order_relaxed);
      return handle;  // start the child as a tail call; its end resumes us as one
    }
#else
    template <class P>
    bool await_suspend(std::coroutine_handle<P> parent) noexcept {
      auto& promise = handle.promise();
      promise.continuation = parent;
      promise.inherit(&detail::context_of(parent));
      std::atomic<bool>& handed_over = promise.handed_over;
      handle.resume();  // until the child first waits, or ends
      // `this` lives in our frame, which the child's end may be resuming on another thread by
      // now: from here on only the flag is touched (the child's frame outlives our exchange:
      // if the child ended first it waits at its end, unresumed, for our frame to destroy it).
      // False (the child has ended): we go on here, and the stack does not grow.
      return !handed_over.exchange(true, std::memory_order_acq_rel);
    }
#endif
    T await_resume() {
      return handle.promise().take();
    }
  };
  Awaiter operator co_await() && noexcept {
    return Awaiter{handle_};
  }

  /// For the runtime: run this task under `context` instead of its awaiter's.
  void set_context(const TaskContext* context) noexcept {
    handle_.promise().set_context(context);
  }
  handle_type release() noexcept {
    return std::exchange(handle_, {});
  }

 private:
  explicit Task(handle_type handle) noexcept : handle_(handle) {}
  handle_type handle_;
};

namespace detail {

// What `co_await a` gives inside a Task, for any awaitable type A (a Task, an awaiter, or a
// type with operator co_await).
template <class A>
decltype(auto) awaiter_of(A&& a) {
  if constexpr (requires { std::forward<A>(a).operator co_await(); })
    return std::forward<A>(a).operator co_await();
  else if constexpr (requires { operator co_await(std::forward<A>(a)); })
    return operator co_await(std::forward<A>(a));
  else
    return std::forward<A>(a);
}
template <class A>
using await_result_t = decltype(awaiter_of(std::declval<A>()).await_resume());

/// Any awaitable as a Task (a Task passes through), so that it can be given a context of its
/// own, spawned, or raced. The awaitable is moved into the task's frame.
template <class A>
Task<std::remove_cvref_t<await_result_t<A>>> as_task(A awaitable) {
  co_return co_await std::move(awaitable);
}
template <class T>
Task<T> as_task(Task<T> task) noexcept {
  return task;
}

}  // namespace detail

}  // namespace arbor
