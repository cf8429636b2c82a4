// Task<T>: a lazy coroutine that produces a T (or throws), awaited exactly once.
//
// - Lazy: nothing runs until the task is awaited (or spawned); a Task that is never awaited
//   destroys its frame without running it.
// - Move-only and awaited once: `co_await std::move(task)`; awaiting an lvalue does not
//   compile, so a task cannot be awaited twice by accident.
// - Symmetric transfer: starting a child and returning to the parent are tail calls
//   (await_suspend returns the next handle), so a long synchronous chain of tasks does not
//   grow the stack.
// - Exceptions thrown in the task are rethrown from co_await in the awaiter.
// - Context: each task carries a pointer to a TaskContext (its Runtime and the stop_token
//   that cancels its IO); an awaited task inherits its awaiter's. Only a pointer is copied:
//   the context lives in the runtime, an abortable task's frame, or a scope's frame
//   (with_timeout, when_any, a task group), each of which outlives every task run under it.
//   cancel.hpp has the public side: this_task::stop_token(), stop_token_of(h).
// - Frames come from frame_pool (per-thread size-class caches) unless ARBOR_POOL_FRAMES=0.
#pragma once

#include <coroutine>
#include <exception>
#include <stop_token>
#include <type_traits>
#include <utility>
#include <variant>

#include "arbor/runtime/frame_pool.hpp"

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
    return h.promise().continuation;  // the awaiter, or noop for a root
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
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> parent) noexcept {
      handle.promise().continuation = parent;
      handle.promise().inherit(&detail::context_of(parent));
      return handle;  // start the child as a tail call
    }
    T await_resume() { return handle.promise().take(); }
  };
  Awaiter operator co_await() && noexcept { return Awaiter{handle_}; }

  /// For the runtime: run this task under `context` instead of its awaiter's.
  void set_context(const TaskContext* context) noexcept { handle_.promise().set_context(context); }
  handle_type release() noexcept { return std::exchange(handle_, {}); }

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
