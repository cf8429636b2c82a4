// TaskGroup: structured concurrency. Tasks spawned into a group all finish before the group's
// scope ends; a group cannot outlive its scope, so no child can outlive the code that
// started it.
//
//   int sum = co_await arbor::task_group<int>([&](arbor::TaskGroup<int>& g) -> arbor::Task<int> {
//     for (int i = 0; i < 10; ++i) g.spawn(work(i));
//     int total = 0;
//     while (auto r = co_await g.next()) total += *r;   // results as they finish (a JoinSet)
//     co_return total;
//   });
//
// Why a scope function and not an object: a coroutine's destructor cannot co_await, so a group
// object dropped with children running could only leak them, block a worker, or terminate.
// task_group() owns the group and always, on every path out of the body (return or throw),
// waits for the children; a body that throws cancels them first. The group is reachable only
// through the reference the body receives, which dies with the body.
//
// Cancellation: the group is a scope (cancel.hpp) linked to the caller's context. cancel()
// stops it: every child and the body itself see their waits complete with
// operation_canceled. With TaskGroupOptions::cancel_on_error, the first child to end with an
// exception cancels the group the moment it ends.
//
// Errors: next() rethrows a child's exception when that child is the next one it returns.
// An exception no next() took is rethrown by task_group() after every child has finished (the
// first one, in finishing order), unless the body threw, whose exception wins.
//
// Threading: children run in parallel on the workers; spawn(), cancel() and size() are
// thread-safe; next() and join() are awaited by one task at a time (normally the body).
#pragma once

#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <utility>
#include <variant>

#include "arbor/runtime/cancel.hpp"
#include "arbor/runtime/error.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

struct TaskGroupOptions {
  /// The first child to end with an exception cancels the group (its siblings and the body).
  bool cancel_on_error = false;
};

template <class T>
class TaskGroup;

namespace detail {
template <class Body, class U>
using body_result_t = typename std::invoke_result_t<Body&, TaskGroup<U>&>::value_type;
}  // namespace detail

template <class T = void>
class TaskGroup {
 public:
  using value_type = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

  /// Runs `body` with a fresh group and returns what body returns, after every child has
  /// finished (task_group<T>(body) is the same). `body` is a callable taking TaskGroup<T>& and
  /// returning a Task; it is moved into the scope's frame, so a lambda's captures live as long
  /// as the body runs. Throws std::system_error(not_in_runtime) outside a runtime.
  template <class Body>
  static Task<detail::body_result_t<Body, T>> scope(Body body, TaskGroupOptions options = {}) {
    using R = detail::body_result_t<Body, T>;
    const TaskContext& outer = co_await detail::CurrentContext{};
    if (outer.runtime == nullptr) throw std::system_error(make_error_code(Errc::not_in_runtime));
    TaskGroup group(outer, options);
    std::exception_ptr body_error;
    std::optional<std::conditional_t<std::is_void_v<R>, int, R>> value;
    try {
      auto task = body(group);
      task.set_context(&group.scope_.context());  // cancel() reaches the body too
      if constexpr (std::is_void_v<R>) {
        co_await std::move(task);
        value.emplace(0);
      } else {
        value.emplace(co_await std::move(task));
      }
    } catch (...) {
      body_error = std::current_exception();
      group.cancel();
    }
    co_await group.join_all();  // every path out of the scope waits for the children
    if (body_error) std::rethrow_exception(body_error);
    if (auto child_error = group.first_untaken_error()) std::rethrow_exception(child_error);
    if constexpr (!std::is_void_v<R>) co_return std::move(*value);
  }

  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;

  /// Starts `task` as a child of the group (it runs in parallel, under the group's
  /// cancellation scope). The group owns it from here until next() returns its result or the
  /// group's scope ends. Spawning into a cancelled group still starts the task, which sees
  /// its token stopped. If it cannot start (std::bad_alloc), it throws and the group does not
  /// count it.
  void spawn(Task<T> task) {
    {
      std::lock_guard lock(mutex_);
      ++running_;
    }
    try {
      runtime_->spawn_in(child(std::move(task), *this), &scope_.context()).detach();
    } catch (...) {
      // Not started (no memory for its frame): the group must not wait for it. The caller is
      // the body or a running child (counted in running_), so no join() is left waiting.
      std::lock_guard lock(mutex_);
      --running_;
      throw;
    }
  }

  /// `co_await g.next()`: the result of the next child to finish (in finishing order), or
  /// nullopt once no child is running and every result has been taken. Rethrows the child's
  /// exception if it ended with one. Not interrupted by cancellation: cancelling the group
  /// makes the children finish, which ends the wait.
  auto next() noexcept { return Next{*this, std::nullopt}; }

  /// The result of a child that has already finished (the earliest), or nullopt if none has:
  /// never waits. Rethrows the child's exception like next(). A long-lived group (a server's
  /// connections) calls it now and then to let finished children's results go, which would
  /// otherwise stay until the scope ends (Tokio's JoinSet::try_join_next).
  std::optional<value_type> try_next() {
    std::optional<Outcome> taken;
    {
      std::lock_guard lock(mutex_);
      if (finished_.empty()) return std::nullopt;
      taken.emplace(std::move(finished_.front()));
      finished_.pop_front();
    }
    if (taken->index() == 1) std::rethrow_exception(std::get<1>(*taken));
    return std::move(std::get<0>(*taken));
  }
  /// `co_await g.join()`: waits until every child spawned so far has finished. Results
  /// nobody took stay for next(); no exception is rethrown here (task_group() does that).
  auto join() noexcept { return Join{*this}; }

  /// Cancels every child and the body: thread-safe, idempotent.
  void cancel() noexcept { scope_.request_stop(); }
  bool cancelled() const noexcept { return scope_.stop_requested(); }

  /// Children running plus results not yet taken.
  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return running_ + finished_.size();
  }

  /// The group's cancellation scope, for tasks that want to spawn under it by other means.
  const TaskContext& context() const noexcept { return scope_.context(); }

 private:
  using Outcome = std::variant<value_type, std::exception_ptr>;

  TaskGroup(const TaskContext& outer, TaskGroupOptions options)
      : scope_(outer), runtime_(outer.runtime), options_(options) {}

  static Task<void> child(Task<T> task, TaskGroup& group) {
    std::optional<Outcome> outcome;
    try {
      if constexpr (std::is_void_v<T>) {
        co_await std::move(task);
        outcome.emplace(std::in_place_index<0>);
      } else {
        outcome.emplace(std::in_place_index<0>, co_await std::move(task));
      }
    } catch (...) {
      outcome.emplace(std::in_place_index<1>, std::current_exception());
      if (group.options_.cancel_on_error) group.cancel();
    }
    group.finished(std::move(*outcome));  // the last touch of the group: it may go after
  }

  void finished(Outcome outcome) {
    std::coroutine_handle<> waiter;
    {
      std::lock_guard lock(mutex_);
      finished_.push_back(std::move(outcome));
      --running_;
      // next() wants any finished child; join() only the last of the running ones.
      if (!waiter_wants_all_ || running_ == 0) waiter = std::exchange(waiter_, {});
    }
    // Inline: the waiter is the group's owner, which must run before the group can go. This
    // child's frame touches nothing of the group after this call.
    if (waiter) waiter.resume();
  }

  struct Next {
    TaskGroup& g;
    std::optional<Outcome> taken;
    bool await_ready() noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) {
      std::lock_guard lock(g.mutex_);
      if (!g.finished_.empty() || g.running_ == 0) return false;
      g.waiter_ = h;  // a finishing child resumes us (after this returns: it needs the lock)
      g.waiter_wants_all_ = false;
      return true;
    }
    std::optional<value_type> await_resume() {
      {
        std::lock_guard lock(g.mutex_);
        if (g.finished_.empty()) return std::nullopt;  // nothing running, nothing left
        taken.emplace(std::move(g.finished_.front()));
        g.finished_.pop_front();
      }
      if (taken->index() == 1) std::rethrow_exception(std::get<1>(*taken));
      return std::move(std::get<0>(*taken));
    }
  };

  struct Join {
    TaskGroup& g;
    bool await_ready() noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) {
      std::lock_guard lock(g.mutex_);
      if (g.running_ == 0) return false;
      g.waiter_ = h;  // the child that leaves none running resumes us
      g.waiter_wants_all_ = true;
      return true;
    }
    void await_resume() noexcept {}
  };

  // Joins until nothing runs (children may still spawn siblings while the join waits: the
  // last to finish resumes it, and running_ counts those too).
  Task<void> join_all() { co_await Join{*this}; }

  std::exception_ptr first_untaken_error() {
    std::lock_guard lock(mutex_);
    for (auto& o : finished_)
      if (o.index() == 1) return std::get<1>(o);
    return nullptr;
  }

  detail::StopScope scope_;
  Runtime* runtime_;
  TaskGroupOptions options_;
  mutable std::mutex mutex_;  // held for a few instructions; never across a suspension
  std::size_t running_ = 0;
  std::deque<Outcome> finished_;
  std::coroutine_handle<> waiter_;  // the one task in next() or join(), if any
  bool waiter_wants_all_ = false;   // join(): resume only when no child is running
};

/// TaskGroup<T>::scope(body, options): see there.
template <class T = void, class Body>
Task<detail::body_result_t<Body, T>> task_group(Body body, TaskGroupOptions options = {}) {
  return TaskGroup<T>::scope(std::move(body), options);
}

}  // namespace arbor
