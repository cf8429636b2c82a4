// How a task parks on one of arbor's synchronisation primitives or channels, and how it is woken.
//
// Invariant: a parked task is resumed exactly once, through its runtime's scheduler, and only
// after the primitive's lock has been released. Every primitive (Mutex, Semaphore, Notify,
// Event, Barrier, the channels) keeps its waiters in a WaiterList under a small SpinLock and
// follows the same three steps:
//
//   1. Under the lock, decide (grant, hand over a message, cancel, close) and move the chosen
//      waiters from the list to a local WakeList, setting each one's outcome and state `done`.
//   2. Release the lock.
//   3. wake_all(): for each waiter, disarm its stop callback, then submit its embedded
//      sched::WorkItem to the scheduler (as arbor::yield does). The scheduler resumes it.
//
// Why through the scheduler and not inline on the waker's stack: the waker is often in the
// middle of user code (a guard's destructor, a send); resuming inline would run the woken task
// on that stack, so a chain of unlocks would recurse as deep as the queue is long, and the waker
// would not get on with its own work until the woken task suspends. A submit costs one queue
// push; with prefer_local the woken task usually runs next on the same worker (warm cache) or is
// stolen by an idle one. Nothing is ever resumed, and no stop callback is destroyed, with a lock
// held: the lock only guards the primitive's fields and the waiters' outcome fields; the only
// user code that may run under it is a message's move/copy constructor (channels), which must
// not touch the channel.
//
// Why a spinlock: every critical section is a few loads and stores (and a message move); no
// thread ever blocks or resumes anyone inside one, so a holder is only preempted, never
// waiting. After a short spin the spinner yields its time slice, which bounds the cost of a
// preempted holder on an oversubscribed machine.
//
// Cancellation (the protocol every arbor awaitable follows): while waiting, and only then, a
// std::stop_callback on the task's stop token is registered (CancelHook). When the token is
// stopped the callback takes the primitive's lock and looks at the waiter's state:
//   - idle (registered, not yet queued): it becomes done with operation_canceled; park() sees
//     that under the lock and does not queue it;
//   - queued: it is removed (the primitive gets the chance to pass what it was blocking on to
//     the next waiter: no wake-up is lost), completes with operation_canceled and is woken;
//   - done: a waker got there first and already handed it the lock, permit or message. The
//     waiter keeps it and completes successfully; the cancellation is seen by its next wait.
// A waker disarms (destroys) the stop callback of each waiter it wakes before submitting it:
// std::stop_callback's destructor waits for a callback running on another thread, so once the
// operation that woke a waiter returns, no callback of that waiter can still touch the
// primitive. That is what makes "no waiters left" enough to destroy a primitive safely.
//
// The runtime's own context cancels IO through its engine (TaskContext::engine_cancels), but
// the engine knows nothing of these waiters, so they register the callback whenever the token
// can be stopped: shutdown wakes them too. The callback is registered only on the slow path.
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stop_token>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include "arbor/io/submit_batch.hpp"
#include "arbor/runtime/error.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/sched/work_item.hpp"
#include "arbor/sync/spin.hpp"

namespace arbor::detail {

/// A test-and-test-and-set lock for critical sections of a few instructions.
class SpinLock {
 public:
  void lock() noexcept {
    // acquire: what the previous holder wrote before its release store is visible to us.
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire);) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          sync::cpu_relax();
        } else {
          std::this_thread::yield();  // the holder may be preempted: give it the core
        }
      }
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

enum class WaitState : unsigned char { idle, queued, done };

struct CancelHook;

/// The node a waiting task occupies in a WaiterList; lives in the awaiter, so waiting never
/// allocates. Fields other than `item` are guarded by the primitive's lock while queued.
struct Waiter {
  sched::WorkItem item{&run};  // first: sched::owner_of<Waiter>
  Waiter* prev = nullptr;
  Waiter* next = nullptr;
  std::coroutine_handle<> handle;
  Runtime* runtime = nullptr;
  CancelHook* hook = nullptr;
  std::error_code error;  // the outcome when not a success
  WaitState state = WaitState::idle;

  static void run(sched::WorkItem* self, sched::Disposition) noexcept {
    // Run or dropped (the scheduler is stopping), the task is resumed: like arbor::yield.
    io::SubmitBatch batch;
    sched::owner_of<Waiter>(self).handle.resume();
  }
};
static_assert(offsetof(Waiter, item) == 0, "sched::owner_of<Waiter> needs the item first");

/// An intrusive FIFO of waiters (doubly linked, so a cancelled waiter leaves in O(1)).
class WaiterList {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  std::size_t size() const noexcept { return size_; }
  Waiter* front() const noexcept { return head_; }
  void push_back(Waiter& w) noexcept {
    w.next = nullptr;
    w.prev = tail_;
    (tail_ != nullptr ? tail_->next : head_) = &w;
    tail_ = &w;
    ++size_;
  }
  Waiter* pop_front() noexcept {
    Waiter* w = head_;
    if (w != nullptr) remove(*w);
    return w;
  }
  void remove(Waiter& w) noexcept {
    (w.prev != nullptr ? w.prev->next : head_) = w.next;
    (w.next != nullptr ? w.next->prev : tail_) = w.prev;
    w.prev = w.next = nullptr;
    --size_;
  }

 private:
  Waiter* head_ = nullptr;
  Waiter* tail_ = nullptr;
  std::size_t size_ = 0;
};

/// Disarms a parked waiter's stop callback, then has the scheduler resume it.
inline void resume_later(Waiter& w) noexcept;

/// Waiters chosen under a lock, woken (in order) once it is released.
class WakeList {
 public:
  WakeList() = default;
  WakeList(const WakeList&) = delete;
  ~WakeList() { wake_all(); }

  /// `w` has left its list; it completes with `error` (empty: success).
  void push(Waiter& w, std::error_code error = {}) noexcept {
    w.error = error;
    w.state = WaitState::done;
    w.next = nullptr;
    (tail_ != nullptr ? tail_->next : head_) = &w;
    tail_ = &w;
  }
  void wake_all() noexcept {
    for (Waiter* w = std::exchange(head_, nullptr); w != nullptr;) {
      Waiter* next = w->next;  // read first: once submitted, w may be resumed and gone
      resume_later(*w);
      w = next;
    }
    tail_ = nullptr;
  }

 private:
  Waiter* head_ = nullptr;
  Waiter* tail_ = nullptr;
};

/// The stop callback a waiting task registers (only while it waits).
struct CancelHook {
  struct Fn {
    void (*cancel)(void* op) noexcept;
    void* op;
    void operator()() const noexcept { cancel(op); }
  };
  std::optional<std::stop_callback<Fn>> callback;

  /// Runs the callback at once if the token is already stopped.
  void arm(const std::stop_token& token, Fn fn) noexcept { callback.emplace(token, fn); }
  /// Returns once the callback cannot run any more (waits for one running elsewhere).
  void disarm() noexcept { callback.reset(); }
};

inline void submit_waiter(Waiter& w) noexcept {
  // Queued, or dropped because the scheduler is stopping: then Waiter::run has resumed the task
  // already, inside this call. Either way nothing here touches `w` afterwards.
  w.runtime->scheduler().submit(w.item, /*prefer_local=*/true);
}

inline void resume_later(Waiter& w) noexcept {
  if (w.hook != nullptr) w.hook->disarm();
  submit_waiter(w);
}

/// An awaiter that waits on a primitive provides, for park() and cancel():
///   SpinLock& lock();            the primitive's lock
///   Waiter& waiter();  CancelHook& hook();
///   bool try_locked(WakeList&);  complete now if possible (under the lock)
///   void enqueue_locked();       join the primitive's list (under the lock)
///   void remove_locked(WakeList&);  leave it on cancellation, passing on what it blocked
template <class Op>
void cancel(void* p) noexcept {
  Op& op = *static_cast<Op*>(p);
  Waiter& w = op.waiter();
  WakeList wake;
  bool self = false;
  op.lock().lock();
  if (w.state == WaitState::idle) {
    w.state = WaitState::done;  // park() will see it and not queue
    w.error = std::make_error_code(std::errc::operation_canceled);
  } else if (w.state == WaitState::queued) {
    op.remove_locked(wake);
    w.state = WaitState::done;
    w.error = std::make_error_code(std::errc::operation_canceled);
    self = true;
  }
  op.lock().unlock();
  wake.wake_all();
  // Our own callback is running: it is not disarmed here (await_resume does it). Last access.
  if (self) submit_waiter(w);
}

/// The slow path of every wait, from await_suspend. True: parked (touch nothing after).
template <class Op, class P>
bool park(Op& op, std::coroutine_handle<P> h) noexcept {
  Waiter& w = op.waiter();
  const TaskContext& ctx = context_of(h);
  w.handle = h;
  w.runtime = ctx.runtime;
  w.hook = &op.hook();
  if (ctx.runtime != nullptr && ctx.token.stop_possible())
    op.hook().arm(ctx.token, CancelHook::Fn{&cancel<Op>, &op});
  WakeList wake;
  bool parked = false;
  op.lock().lock();
  if (w.state == WaitState::done) {
    // cancelled by the callback, already or from another thread since it was armed
  } else if (op.try_locked(wake)) {
    w.state = WaitState::done;
  } else if (ctx.runtime == nullptr) {
    w.state = WaitState::done;
    w.error = make_error_code(Errc::not_in_runtime);
  } else {
    w.state = WaitState::queued;
    op.enqueue_locked();
    parked = true;
  }
  op.lock().unlock();
  // From here on, if parked, we may be resumed on another thread: only locals are touched.
  wake.wake_all();
  return parked;
}

/// The fast path, from await_ready: completes under the lock without registering anything.
template <class Op>
bool try_now(Op& op) noexcept {
  WakeList wake;
  op.lock().lock();
  const bool done = op.try_locked(wake);
  op.lock().unlock();
  if (done) op.waiter().state = WaitState::done;
  return done;
}

/// The common shape of an awaiter that parks on a primitive: it owns the waiter node and the
/// cancel hook, and knows the primitive's lock and the list it waits in. Derived supplies
/// try_locked() and await_resume() (which starts with finish()), and may replace
/// enqueue_locked() / remove_locked() (hiding these) when waiting changes more than the list,
/// or await_ready() with a lock-free fast path.
template <class Derived, class Node = Waiter>
class ParkingAwaiter {
 public:
  ParkingAwaiter(SpinLock& lock, WaiterList& list) noexcept : lock_(lock), list_(list) {}
  /// Only before it is awaited (cancel.hpp's rule 5: with_timeout and when_any move the
  /// awaitable into a frame of their own). Once awaited it is pinned: the list and the stop
  /// callback point at it.
  ParkingAwaiter(ParkingAwaiter&& other) noexcept(std::is_nothrow_move_constructible_v<Node>)
      : node_(std::move(other.node_)), lock_(other.lock_), list_(other.list_) {}
  ParkingAwaiter(const ParkingAwaiter&) = delete;
  ParkingAwaiter& operator=(const ParkingAwaiter&) = delete;

  bool await_ready() noexcept { return try_now(self()); }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    return park(self(), h);
  }

  // For park() and cancel().
  SpinLock& lock() noexcept { return lock_; }
  Waiter& waiter() noexcept { return node_; }
  CancelHook& hook() noexcept { return hook_; }
  void enqueue_locked() noexcept { list_.push_back(node_); }
  void remove_locked(WakeList&) noexcept { list_.remove(node_); }

 protected:
  /// The common end of await_resume: the callback is gone, then the outcome.
  std::error_code finish() noexcept {
    hook_.disarm();
    return node_.error;
  }

  Node node_;

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
  SpinLock& lock_;
  WaiterList& list_;
  CancelHook hook_;
};

/// For destructors: destroying a primitive that tasks still wait on is a precondition
/// violation; it ends the process with a message rather than leaving them to dangle.
[[noreturn]] inline void destroyed_with_waiters(const char* what) noexcept {
  std::fprintf(stderr, "arbor: %s destroyed while tasks wait on it\n", what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace arbor::detail
