// use_task and cancel_with(obj): completion tokens that make any Asio asynchronous operation
// awaitable in an arbor Task.
//
//   auto n = co_await socket.async_read_some(buffer, arbor::asio::use_task);  // Result<size_t>
//   auto r = co_await timer.async_wait(arbor::asio::cancel_with(timer));      // Result<void>
//
// The awaited value follows the completion signature: (error_code) -> Result<void>;
// (error_code, T) -> Result<T>, the error through to_std() (error.hpp); () -> Result<void>;
// (exception_ptr) and (exception_ptr, T), what co_spawn completes with, -> void and T, the
// exception rethrown.
//
// Cancellation. Boost 1.74 has no per-operation cancellation slots (they came in 1.77), so
// use_task alone cannot cancel anything: a with_timeout, when_any or abort around it waits
// for the operation to end by itself. cancel_with(obj) ties the awaiting task's stop token
// (cancel.hpp) to the object instead: when it fires, obj.cancel() is posted on the object's
// executor (Asio objects are not thread-safe), once the initiating call has returned (a stop
// that arrives during it is held until then), which ends every operation pending on obj
// with operation_aborted, and the task resumes once both the operation's handler and that
// cancel() have run, so the cancel can never reach an object the task has since destroyed.
// A token already stopped starts nothing: the result is operation_canceled.
//
// Ownership: the operation's arguments move into the awaitable and from there into the
// initiation when the task suspends; the handler holds only a pointer into the suspended
// frame. A handler destroyed without being called (its context shut down) resumes the task
// with operation_canceled, on the runtime's workers, instead of leaving it suspended forever.
// The task resumes inline when the handler runs on one of its runtime's workers, and is
// queued on them otherwise (a handler an io_context thread runs).
#pragma once

#include <atomic>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>
#include <coroutine>
#include <exception>
#include <optional>
#include <stop_token>
#include <tuple>
#include <type_traits>
#include <utility>

#include "arbor/asio/error.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/cancel.hpp"
#include "arbor/runtime/runtime.hpp"

namespace arbor::asio {

/// The token: `co_await op(args..., arbor::asio::use_task)`.
struct use_task_t {
  constexpr use_task_t() noexcept = default;
};
inline constexpr use_task_t use_task{};

/// The token that also cancels: `co_await op(args..., arbor::asio::cancel_with(obj))`. `obj`
/// must have get_executor() and cancel() (or cancel(error_code&)) and outlive the await.
template <class Object>
struct cancel_with_t {
  Object* object;
};
template <class Object>
cancel_with_t<Object> cancel_with(Object& object) noexcept {
  return {&object};
}

namespace detail {

// What a completion signature's arguments become.
template <class... Args>
struct Outcome;
template <>
struct Outcome<> {
  using type = Result<void>;
  std::optional<type> value;
  void set() { value.emplace(); }
  void fail(std::error_code e) { value.emplace(e); }
  type take() { return std::move(*value); }
};
template <>
struct Outcome<boost::system::error_code> {
  using type = Result<void>;
  std::optional<type> value;
  void set(const boost::system::error_code& ec) {
    if (ec)
      value.emplace(to_std(ec));
    else
      value.emplace();
  }
  void fail(std::error_code e) { value.emplace(e); }
  type take() { return std::move(*value); }
};
template <class T>
struct Outcome<boost::system::error_code, T> {
  using type = Result<T>;
  std::optional<type> value;
  template <class U>
  void set(const boost::system::error_code& ec, U&& v) {
    if (ec)
      value.emplace(to_std(ec));
    else
      value.emplace(std::forward<U>(v));
  }
  void fail(std::error_code e) { value.emplace(e); }
  type take() { return std::move(*value); }
};
template <>
struct Outcome<std::exception_ptr> {
  using type = void;
  std::exception_ptr error;
  void set(std::exception_ptr e) { error = std::move(e); }
  void fail(std::error_code e) { error = std::make_exception_ptr(std::system_error(e)); }
  void take() {
    if (error) std::rethrow_exception(std::move(error));
  }
};
template <class T>
struct Outcome<std::exception_ptr, T> {
  using type = T;
  std::exception_ptr error;
  std::optional<T> value;
  template <class U>
  void set(std::exception_ptr e, U&& v) {
    error = std::move(e);
    if (!error) value.emplace(std::forward<U>(v));
  }
  void fail(std::error_code e) { error = std::make_exception_ptr(std::system_error(e)); }
  T take() {
    if (error) std::rethrow_exception(std::move(error));
    return std::move(*value);
  }
};

template <class Signature>
struct OutcomeOf;
template <class R, class... Args>
struct OutcomeOf<R(Args...)> {
  using type = Outcome<std::decay_t<Args>...>;
};

template <class Object>
void cancel_object(Object& object) {
  if constexpr (requires(boost::system::error_code & ec) { object.cancel(ec); }) {
    boost::system::error_code ignored;
    object.cancel(ignored);
  } else {
    object.cancel();
  }
}

// Who may resume the task: the initiating call (once it has returned), the handler and,
// once a cancel was posted, the cancel too. The last of them to finish resumes it; if that is
// the initiating call (the handler ran inside it, as dispatch() does on a worker), the task
// goes on from await_suspend without a nested resume, so a loop of such awaits keeps a flat
// stack. A stop that arrives while the operation is being started is only noted
// (kCancelWanted): the initiating call posts the cancel once it has returned, so the cancel
// neither misses an operation that was not pending yet nor runs on the object while the
// initiation is still using it on this thread.
enum : unsigned {
  kHandlerDone = 1,
  kCancelPosted = 2,
  kCancelDone = 4,
  kStarted = 8,
  kCancelWanted = 16,
};

// The state in the suspended frame that the handler and a posted cancel point at.
template <class OutcomeT>
class Waiter {
 public:
  OutcomeT outcome;

  void handler_done() noexcept {
    const unsigned before = state_.fetch_or(kHandlerDone, std::memory_order_acq_rel);
    if (ready(before | kHandlerDone)) resume(false);
  }
  void handler_dropped() noexcept {
    outcome.fail(std::make_error_code(std::errc::operation_canceled));
    const unsigned before = state_.fetch_or(kHandlerDone, std::memory_order_acq_rel);
    if (ready(before | kHandlerDone)) resume(true);
  }
  void cancel_done() noexcept {
    const unsigned before = state_.fetch_or(kCancelDone, std::memory_order_acq_rel);
    if (ready(before | kCancelDone)) resume(false);
  }
  // In await_suspend, when nothing will be started: true if the task may go on at once.
  bool done_early() noexcept {
    const unsigned before = state_.fetch_or(kHandlerDone | kStarted, std::memory_order_acq_rel);
    return ready(before | kHandlerDone | kStarted);
  }
  // In await_suspend, once the initiation has returned: true if the task may go on at once
  // (the handler has already run); posts the cancel a stop asked for meanwhile.
  template <class Post>
  bool started(Post&& post_cancel) noexcept {
    unsigned current = state_.load(std::memory_order_acquire);
    unsigned next;
    do {
      next = current | kStarted;
      if ((current & kCancelWanted) && !(current & kHandlerDone)) next |= kCancelPosted;
    } while (!state_.compare_exchange_weak(current, next, std::memory_order_acq_rel));
    if ((next & kCancelPosted) && !(current & kCancelPosted)) {
      post_cancel();  // the frame stays until that cancel is done
      return false;
    }
    return ready(next);
  }
  // From the stop callback: true if the caller is to post the cancel now; false if the
  // handler has already run (nothing to cancel) or the operation is still being started
  // (the initiating call posts it when it returns).
  bool claim_cancel() noexcept {
    unsigned current = state_.load(std::memory_order_acquire);
    unsigned next;
    do {
      if (current & kHandlerDone) return false;
      next = current | ((current & kStarted) ? kCancelPosted : kCancelWanted);
    } while (!state_.compare_exchange_weak(current, next, std::memory_order_acq_rel));
    return (next & kCancelPosted) != 0;
  }

 protected:
  std::coroutine_handle<> task_;
  Runtime* runtime_ = nullptr;

 private:
  static bool ready(unsigned s) noexcept {
    return (s & kStarted) && (s & kHandlerDone) && (!(s & kCancelPosted) || (s & kCancelDone));
  }
  void resume(bool queue) noexcept {
    if (runtime_ == nullptr) {
      task_.resume();
    } else if (!queue && sched::Scheduler::current() == &runtime_->scheduler()) {
      io::SubmitBatch batch;
      task_.resume();
    } else {
      resumer_.schedule(*runtime_, task_);
    }
  }

  std::atomic<unsigned> state_{0};
  Resumer resumer_;
};

// The completion handler: a pointer to the waiter, which it completes exactly once, called
// or destroyed.
template <class OutcomeT, class... Args>
class TaskHandler {
 public:
  explicit TaskHandler(Waiter<OutcomeT>* waiter) noexcept : waiter_(waiter) {}
  TaskHandler(TaskHandler&& other) noexcept : waiter_(std::exchange(other.waiter_, nullptr)) {}
  TaskHandler& operator=(TaskHandler&&) = delete;
  ~TaskHandler() {
    if (waiter_ != nullptr) waiter_->handler_dropped();
  }
  template <class... A>
  void operator()(A&&... args) {
    auto* w = std::exchange(waiter_, nullptr);
    w->outcome.set(std::forward<A>(args)...);
    w->handler_done();  // may resume the task, which may destroy everything: last
  }

 private:
  Waiter<OutcomeT>* waiter_;
};

template <class Signature>
struct HandlerOf;
template <class R, class... Args>
struct HandlerOf<R(Args...)> {
  using type = TaskHandler<typename OutcomeOf<R(Args...)>::type, Args...>;
};

// The posted cancel: runs obj.cancel() on the object's executor; run or destroyed unrun, it
// tells the waiter it is done.
template <class OutcomeT, class Object>
class PostedCancel {
 public:
  PostedCancel(Waiter<OutcomeT>* waiter, Object* object) noexcept
      : waiter_(waiter), object_(object) {}
  PostedCancel(PostedCancel&& other) noexcept
      : waiter_(std::exchange(other.waiter_, nullptr)), object_(other.object_) {}
  PostedCancel& operator=(PostedCancel&&) = delete;
  ~PostedCancel() {
    if (waiter_ != nullptr) waiter_->cancel_done();
  }
  void operator()() {
    cancel_object(*object_);
    std::exchange(waiter_, nullptr)->cancel_done();
  }

 private:
  Waiter<OutcomeT>* waiter_;
  Object* object_;
};

struct NoObject {};

// The awaitable an operation with use_task / cancel_with returns: nothing starts until the
// task awaits it.
template <class Signature, class Object, class Initiation, class... Args>
class Awaitable : public Waiter<typename OutcomeOf<Signature>::type> {
  using OutcomeT = typename OutcomeOf<Signature>::type;
  using Handler = typename HandlerOf<Signature>::type;

 public:
  template <class I, class... A>
  Awaitable(Object* object, I&& initiation, A&&... args)
      : object_(object),
        initiation_(std::forward<I>(initiation)),
        args_(std::forward<A>(args)...) {}
  Awaitable(Awaitable&& other) noexcept(std::is_nothrow_move_constructible_v<Initiation>)
      : object_(other.object_),
        initiation_(std::move(other.initiation_)),
        args_(std::move(other.args_)) {}

  bool await_ready() const noexcept { return false; }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    this->task_ = h;
    this->runtime_ = runtime_of(h);
    if constexpr (!std::is_same_v<Object, NoObject>) {
      auto token = stop_token_of(h);
      if (token.stop_requested()) {
        this->outcome.fail(std::make_error_code(std::errc::operation_canceled));
        return false;
      }
      if (token.stop_possible()) {
        stop_.emplace(token, Canceller{this});
        // Stopped while registering: start nothing (the callback only noted the stop: it
        // posts nothing before the operation has been started).
        if (token.stop_requested()) {
          this->outcome.fail(std::make_error_code(std::errc::operation_canceled));
          return !this->done_early();
        }
      }
    }
    // Into locals first: once the initiation has the handler, the task may resume (and this
    // awaitable go) on another thread before the initiation returns.
    auto initiation = std::move(initiation_);
    auto args = std::move(args_);
    std::apply([&](auto&... a) { std::move(initiation)(Handler(this), std::move(a)...); }, args);
    return !this->started([this] { post_cancel(); });
  }
  typename OutcomeT::type await_resume() {
    stop_.reset();  // waits for a callback still running on another thread
    return this->outcome.take();
  }

 private:
  struct Canceller {
    Awaitable* self;
    void operator()() const noexcept {
      if constexpr (!std::is_same_v<Object, NoObject>) {
        if (self->claim_cancel()) self->post_cancel();
      }
    }
  };

  void post_cancel() {
    if constexpr (!std::is_same_v<Object, NoObject>) {
      auto executor = object_->get_executor();
      boost::asio::post(executor, PostedCancel<OutcomeT, Object>(this, object_));
    }
  }

  Object* object_;
  Initiation initiation_;
  std::tuple<Args...> args_;
  std::optional<std::stop_callback<Canceller>> stop_;
};

}  // namespace detail
}  // namespace arbor::asio

namespace boost::asio {

template <class R, class... Args>
class async_result<arbor::asio::use_task_t, R(Args...)> {
 public:
  template <class Initiation, class... InitArgs>
  static auto initiate(Initiation&& initiation, arbor::asio::use_task_t, InitArgs&&... args) {
    return arbor::asio::detail::Awaitable<R(Args...), arbor::asio::detail::NoObject,
                                          std::decay_t<Initiation>, std::decay_t<InitArgs>...>(
        nullptr, std::forward<Initiation>(initiation), std::forward<InitArgs>(args)...);
  }
};

template <class Object, class R, class... Args>
class async_result<arbor::asio::cancel_with_t<Object>, R(Args...)> {
 public:
  template <class Initiation, class... InitArgs>
  static auto initiate(Initiation&& initiation, arbor::asio::cancel_with_t<Object> token,
                       InitArgs&&... args) {
    return arbor::asio::detail::Awaitable<R(Args...), Object, std::decay_t<Initiation>,
                                          std::decay_t<InitArgs>...>(
        token.object, std::forward<Initiation>(initiation), std::forward<InitArgs>(args)...);
  }
};

}  // namespace boost::asio
