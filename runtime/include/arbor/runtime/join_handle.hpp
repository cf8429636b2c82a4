// JoinHandle<T>: the owner's end of a spawned task.
//
// A spawned task runs on its own (it is a root: nobody awaits it to start it). Its frame holds
// the result until the handle takes it, and is freed by whichever of the two finishes last —
// the task reaching its end or the handle being dropped (detached). `co_await
// std::move(handle)` waits for the result; dropping the handle detaches the task.
//
// Synchronisation: `waiter` is one word — nullptr (running, nobody waiting), the awaiting
// coroutine's address, kDone, or kJoinCancelled (a joiner was cancelled before it could
// suspend). The finishing task exchanges kDone in (acq_rel: it publishes the result and sees
// the waiter); a joiner CASes its address in, or finds kDone and continues at once. A joiner's
// stop callback takes its address back out with a CAS, so exactly one of "finished" and
// "cancelled" resumes it. `refs` starts at 2 (task + handle); the last release destroys the
// frame.
//
// Abort: a task spawned with Runtime::spawn_abortable owns a StopScope (its own stop_source,
// linked to the runtime's), which abort() stops. Plain spawn() tasks have none and pay nothing:
// their IO keeps the runtime's callback-free cancellation (see TaskContext::engine_cancels).
//
// An exception nobody takes is not lost: joining takes it out of the frame, and a frame
// destroyed with one still in it (its handle was dropped without joining) reports it once —
// logged at error level and counted in unobserved_task_exceptions().
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <system_error>
#include <variant>

#include "arbor/runtime/task.hpp"
#include "arbor/sched/work_item.hpp"
#include "arbor/sync/futex.hpp"

namespace arbor {

namespace detail {

inline void* const kDone = reinterpret_cast<void*>(std::uintptr_t{1});
inline void* const kJoinCancelled = reinterpret_cast<void*>(std::uintptr_t{2});

// A spawned task's frame is its own start item: the WorkItem is a base, not a member, so the
// start function gets back to the promise with static_casts (sched::owner_of), which hold for
// any layout. `scope` is a unique_ptr, which is not standard-layout everywhere (clang 14 with
// libstdc++ 12), so a first-member cast would not be portable here.
struct SpawnCore : sched::WorkItem {
  SpawnCore() noexcept : sched::WorkItem(nullptr) {}
  std::atomic<void*> waiter{nullptr};
  std::atomic<int> refs{2};
  // Futex word for blocking joins: 0 running, 1 done, 2 running with a thread blocked on it
  // (so finishing costs a futex wake only when someone is actually asleep).
  std::atomic<std::uint32_t> done{0};
  Runtime* runtime = nullptr;
  std::unique_ptr<StopScope> scope;  // abortable tasks only: the context they run under
};

void spawned_finished(Runtime& runtime) noexcept;
/// Queues `item` on `runtime`'s workers (or runs it inline, dropped, if they are stopping).
void submit_to_workers(Runtime& runtime, sched::WorkItem& item) noexcept;
void report_unobserved(const std::exception_ptr& error) noexcept;

template <class T>
struct SpawnedPromiseBase : PromiseBase, SpawnCore {
  std::suspend_always initial_suspend() const noexcept { return {}; }
  void unhandled_exception() noexcept { result.template emplace<2>(std::current_exception()); }
  std::variant<std::monostate, std::conditional_t<std::is_void_v<T>, std::monostate, T>,
               std::exception_ptr>
      result;
};

template <class T>
struct SpawnedPromise : SpawnedPromiseBase<T> {
  template <class U>
  void return_value(U&& value) {
    this->result.template emplace<1>(std::forward<U>(value));
  }
};
template <>
struct SpawnedPromise<void> : SpawnedPromiseBase<void> {
  void return_void() noexcept { result.emplace<1>(); }
};

template <class Promise>
void release(std::coroutine_handle<Promise> h) noexcept {
  auto& p = h.promise();
  if (p.refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (p.result.index() == 2) report_unobserved(std::get<2>(p.result));
  h.destroy();
}

// Marks the task done, wakes its joiner, and returns who runs next.
template <class Promise>
std::coroutine_handle<> finish(std::coroutine_handle<Promise> h) noexcept {
  Promise& p = h.promise();
  Runtime* runtime = p.runtime;
  void* waiter = p.waiter.exchange(kDone, std::memory_order_acq_rel);
  if (p.done.exchange(1, std::memory_order_acq_rel) == 2) sync::futex_wake_all(p.done);
  release(h);  // may free the frame: nothing below touches it
  if (runtime != nullptr) spawned_finished(*runtime);
  return waiter != nullptr && waiter != kJoinCancelled
             ? std::coroutine_handle<>::from_address(waiter)
             : std::noop_coroutine();
}

template <class T>
struct Spawned {
  struct promise_type : SpawnedPromise<T> {
    Spawned get_return_object() noexcept {
      return {std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    struct Final {
      bool await_ready() const noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        return finish(h);
      }
      void await_resume() const noexcept {}
    };
    Final final_suspend() const noexcept { return {}; }
  };
  std::coroutine_handle<promise_type> handle;
};

template <class T>
Spawned<T> run_spawned(Task<T> task) {
  co_return co_await std::move(task);
}

}  // namespace detail

/// Exceptions that ended a spawned task whose handle was dropped without joining, since the
/// process started (each is also logged once).
std::uint64_t unobserved_task_exceptions() noexcept;

template <class T = void>
class [[nodiscard]] JoinHandle {
 public:
  using promise_type = typename detail::Spawned<T>::promise_type;
  using handle_type = std::coroutine_handle<promise_type>;

  JoinHandle() = default;
  explicit JoinHandle(handle_type h) noexcept : handle_(h) {}
  JoinHandle(JoinHandle&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  JoinHandle& operator=(JoinHandle&& other) noexcept {
    if (this != &other) {
      detach();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  ~JoinHandle() { detach(); }

  /// Lets the task run on with nobody to collect its result.
  void detach() noexcept {
    if (handle_) detail::release(std::exchange(handle_, {}));
  }
  bool valid() const noexcept { return static_cast<bool>(handle_); }
  bool done() const noexcept {
    return handle_ && handle_.promise().waiter.load(std::memory_order_acquire) == detail::kDone;
  }

  /// Awaiting a handle. Interruptible: a joiner whose scope (with_timeout, when_any, a task
  /// group, its own abort) is cancelled stops waiting and gets
  /// std::system_error(operation_canceled); the task runs on and the handle stays valid (await
  /// it again, abort it, or drop it). Runtime shutdown alone does not interrupt a join: it
  /// cancels the joined task too, which then ends. The internal joins of when_all/when_any are not
  /// interruptible: they must outlive their children.
  template <bool Interruptible>
  class AwaiterT {
   public:
    explicit AwaiterT(handle_type handle) noexcept : handle_(handle) {}
    AwaiterT(const AwaiterT&) = delete;
    AwaiterT& operator=(const AwaiterT&) = delete;

    bool await_ready() const noexcept {
      return handle_.promise().waiter.load(std::memory_order_acquire) == detail::kDone;
    }
    template <class P>
    bool await_suspend(std::coroutine_handle<P> joiner) noexcept {
      auto& waiter = handle_.promise().waiter;
      if constexpr (Interruptible) {
        // Under the runtime's shared token a join is not interrupted: registering a callback
        // there is a lock every worker would contend for, per join, and what stops that token
        // (shutdown) cancels the joined task as well, so the join ends promptly anyway.
        const TaskContext& ctx = detail::context_of(joiner);
        if (ctx.runtime != nullptr && ctx.needs_callback()) {
          if (ctx.token.stop_requested()) {
            cancelled_ = true;
            return false;
          }
          wake_.joiner = joiner;
          runtime_ = ctx.runtime;
          // Registered before we publish ourselves: once published, the task may resume us
          // on another thread at any moment, so nothing may touch this awaiter after.
          cancel_.emplace(ctx.token, Cancel{this});
        }
      }
      void* expected = nullptr;
      if (waiter.compare_exchange_strong(expected, joiner.address(), std::memory_order_acq_rel,
                                         std::memory_order_acquire))
        return true;
      // kDone (finished: take the result) or kJoinCancelled (our callback ran first).
      if constexpr (Interruptible) cancelled_ = expected == detail::kJoinCancelled;
      return false;
    }
    T await_resume() {
      if constexpr (Interruptible) {
        cancel_.reset();  // waits for our callback if it is running on another thread
        if (cancelled_) {
          // Let the handle be awaited again: put back "nobody waiting" unless it finished.
          void* expected = detail::kJoinCancelled;
          handle_.promise().waiter.compare_exchange_strong(expected, nullptr,
                                                           std::memory_order_acq_rel);
          throw std::system_error(std::make_error_code(std::errc::operation_canceled),
                                  "arbor: join cancelled");
        }
      }
      return take(handle_);
    }

   private:
    struct Cancel {
      AwaiterT* self;
      void operator()() const noexcept { self->on_stop(); }
    };
    void on_stop() noexcept {
      auto& waiter = handle_.promise().waiter;
      void* w = waiter.load(std::memory_order_acquire);
      for (;;) {
        if (w == detail::kDone || w == detail::kJoinCancelled) return;  // the finisher resumes
        void* next = w == nullptr ? detail::kJoinCancelled : nullptr;
        if (!waiter.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                          std::memory_order_acquire))
          continue;
        if (w == nullptr) return;  // not suspended yet: await_suspend will see kJoinCancelled
        // We took our address back: nobody else will resume us. Not inline: a stop callback
        // runs on whichever thread requested stop, and a task runs only on the workers.
        cancelled_ = true;
        detail::submit_to_workers(*runtime_, wake_);
        return;
      }
    }
    struct Wake : sched::WorkItem {
      Wake() noexcept : sched::WorkItem(&run) {}
      static void run(sched::WorkItem* item, sched::Disposition) noexcept {
        static_cast<Wake*>(item)->joiner.resume();
      }
      std::coroutine_handle<> joiner;
    };

    handle_type handle_;
    Wake wake_;
    Runtime* runtime_ = nullptr;
    bool cancelled_ = false;
    std::optional<std::stop_callback<Cancel>> cancel_;
  };
  using Awaiter = AwaiterT<true>;

  /// Waits for the task's result (rethrows its exception). The handle is spent afterwards,
  /// unless the wait was cancelled (see AwaiterT).
  Awaiter operator co_await() && noexcept { return Awaiter{handle_}; }
  /// Waits for the task without being interruptible by the awaiter's cancellation (for scopes
  /// that must outlive their children).
  AwaiterT<false> join_uninterruptibly() && noexcept { return AwaiterT<false>{handle_}; }

  /// Cancels the task: its pending and later operations complete with operation_canceled, and
  /// so do those of every task it awaits or runs with when_all/when_any or in a task group.
  /// The task still runs to its end (which it reaches promptly if it follows cancel.hpp's
  /// protocol); the frame goes when both it has ended and the handle is gone. Thread-safe;
  /// idempotent. Only for tasks started with Runtime::spawn_abortable: on any other handle it
  /// throws std::logic_error (a plain spawn has no stop source of its own, see above).
  void abort() const {
    if (!abortable()) throw std::logic_error("arbor: abort() on a task not spawned abortable");
    handle_.promise().scope->request_stop();
  }
  /// Whether abort() can cancel this task (it was started with Runtime::spawn_abortable).
  bool abortable() const noexcept { return handle_ && handle_.promise().scope != nullptr; }

  /// Blocks the calling thread (never a worker) until the task ends; returns its result.
  T join_blocking() {
    auto& done = handle_.promise().done;
    std::uint32_t state = 0;
    while (!done.compare_exchange_weak(state, 2, std::memory_order_acquire) && state != 1) {
    }
    while (state != 1) {
      sync::futex_wait(done, 2);
      state = done.load(std::memory_order_acquire);
    }
    return take(handle_);
  }

 private:
  static T take(handle_type h) {
    auto& result = h.promise().result;
    if (result.index() == 2) {
      // Taken out, so that the frame does not report it as unobserved when it goes.
      std::exception_ptr error = std::move(std::get<2>(result));
      result.template emplace<0>();
      std::rethrow_exception(error);
    }
    if constexpr (!std::is_void_v<T>) return std::move(std::get<1>(result));
  }
  handle_type handle_;
};

}  // namespace arbor
