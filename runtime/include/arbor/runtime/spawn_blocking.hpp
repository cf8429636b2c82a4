// spawn_blocking: run a function that blocks (a file read, fsync, a lookup through a blocking
// library) on the runtime's blocking pool, and await its result from a task.
//
//   auto size = rt.spawn_blocking([&] { return std::filesystem::file_size(path); });
//   std::uintmax_t n = co_await std::move(size);   // rethrows what the function threw
//
// The pool's threads are not workers: a job never holds up the tasks, timers and sockets the
// workers serve, and a task never runs on a pool thread (the awaiting task is resumed by
// submitting it to its runtime's workers). Pool: runtime/src/blocking_pool.hpp.
//
// A job is one heap block shared by the pool and the handle, freed by whichever lets go last
// (`refs` starts at 2), like a spawned task's frame (join_handle.hpp). Synchronisation is the
// same one-word protocol: `waiter` is nullptr (nobody waiting), the awaiter's BlockingWaiter,
// kDone, or kJoinCancelled (the awaiter was cancelled before it could suspend). Finishing
// exchanges kDone in (acq_rel: publishes the result, sees the waiter); the awaiter CASes itself
// in; its stop callback CASes itself out, so exactly one of "done" and "cancelled" resumes it.
#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <exception>
#include <functional>
#include <optional>
#include <stop_token>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "arbor/runtime/cancel.hpp"
#include "arbor/runtime/join_handle.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

class Runtime;

/// The blocking pool's bounds (RuntimeOptions::blocking).
struct BlockingPoolOptions {
  /// Threads the pool may run at once (ARBOR_MAX_BLOCKING_THREADS). Jobs beyond it wait in
  /// the pool's queue, which is unbounded: each queued job is its own allocation, nothing more.
  int max_threads = 64;
  /// How long an idle thread waits for a job before it exits.
  std::chrono::milliseconds keep_alive{10000};
};

namespace detail {

// Runtime::stop_token() without Runtime's definition (runtime.hpp includes this header).
std::stop_token runtime_stop_token(Runtime& runtime) noexcept;

// The awaiting task, published in BlockingJob::waiter; lives in the suspended task's awaiter.
struct BlockingWaiter {
  std::coroutine_handle<> task;
  Runtime* runtime = nullptr;
  Resumer resumer;
};

// What the pool sees of a job: a queue link and two entry points.
struct BlockingJob {
  using Run = void (*)(BlockingJob*) noexcept;
  using Destroy = void (*)(BlockingJob*) noexcept;
  BlockingJob(Run r, Destroy d, Runtime* rt) noexcept : run(r), destroy(d), runtime(rt) {}

  BlockingJob* next = nullptr;  // the pool's queue (under its mutex)
  std::atomic<void*> waiter{nullptr};
  std::atomic<int> refs{2};  // the pool's and the handle's
  Run run;                   // calls the function, stores its result or exception
  Destroy destroy;           // frees the job (reports an exception nobody took)
  Runtime* runtime;          // resumes an awaiter that is not in a runtime task
  bool ran = false;          // false: dropped unstarted (written before kDone is published)
};

// Publishes the result and resumes the awaiter, if one is suspended, on its runtime's workers.
inline void complete(BlockingJob& job) noexcept {
  void* w = job.waiter.exchange(kDone, std::memory_order_acq_rel);
  if (w == nullptr || w == kJoinCancelled) return;
  auto* waiter = static_cast<BlockingWaiter*>(w);
  waiter->resumer.schedule(*waiter->runtime, waiter->task);
}

inline void release(BlockingJob& job) noexcept {
  if (job.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) job.destroy(&job);
}

template <class T>
struct BlockingResult : BlockingJob {
  using BlockingJob::BlockingJob;
  std::variant<std::monostate, std::conditional_t<std::is_void_v<T>, std::monostate, T>,
               std::exception_ptr>
      result;
};

template <class F, class T>
struct BlockingState final : BlockingResult<T> {
  template <class G>
  BlockingState(G&& g, Runtime* rt)
      : BlockingResult<T>(&run_fn, &destroy_fn, rt), fn(std::in_place, std::forward<G>(g)) {}
  std::optional<F> fn;  // reset once run: what it captured goes on the pool thread, promptly

  static void run_fn(BlockingJob* job) noexcept {
    auto* self = static_cast<BlockingState*>(job);
    try {
      if constexpr (std::is_void_v<T>) {
        std::invoke(*self->fn);
        self->result.template emplace<1>();
      } else {
        self->result.template emplace<1>(std::invoke(*self->fn));
      }
    } catch (...) {
      self->result.template emplace<2>(std::current_exception());
    }
    self->fn.reset();
    self->ran = true;
  }
  static void destroy_fn(BlockingJob* job) noexcept {
    auto* self = static_cast<BlockingState*>(job);
    if (self->ran && self->result.index() == 2) report_unobserved(std::get<2>(self->result));
    delete self;
  }
};

// What the handle gives: the function's result by value (a reference it returns is copied, as
// nothing it refers to is the handle's to keep alive).
template <class F>
using blocking_result_t = std::remove_cvref_t<std::invoke_result_t<std::decay_t<F>&>>;

}  // namespace detail

/// The awaiting end of a job given to Runtime::spawn_blocking. Move-only; `co_await
/// std::move(handle)` once for the result. Dropping it detaches the job: it still runs, and
/// its result (or exception, which is then logged as unobserved) is dropped.
template <class T>
class [[nodiscard]] BlockingHandle {
 public:
  BlockingHandle() = default;
  explicit BlockingHandle(detail::BlockingResult<T>* job) noexcept : job_(job) {}
  BlockingHandle(BlockingHandle&& other) noexcept : job_(std::exchange(other.job_, nullptr)) {}
  BlockingHandle& operator=(BlockingHandle&& other) noexcept {
    if (this != &other) {
      detach();
      job_ = std::exchange(other.job_, nullptr);
    }
    return *this;
  }
  ~BlockingHandle() { detach(); }

  void detach() noexcept {
    if (job_ != nullptr) detail::release(*std::exchange(job_, nullptr));
  }
  bool valid() const noexcept { return job_ != nullptr; }
  /// The function has returned or thrown (or the job was dropped by shutdown).
  bool done() const noexcept {
    return job_ != nullptr && job_->waiter.load(std::memory_order_acquire) == detail::kDone;
  }

  /// Awaiting the job. Cancellable like any wait (cancel.hpp), runtime shutdown included: a
  /// cancelled wait throws std::system_error(operation_canceled) at once while the function
  /// runs on (a blocking call cannot be interrupted); the handle stays valid (await it again or
  /// drop it, which drops the result). A job the runtime dropped unstarted (it shut down first)
  /// throws the same error.
  class Awaiter {
   public:
    explicit Awaiter(detail::BlockingResult<T>* job) noexcept : job_(job) {}
    /// Only before it is awaited (with_timeout and when_any move it into their own frame).
    Awaiter(Awaiter&& other) noexcept : job_(other.job_) {}
    Awaiter& operator=(Awaiter&&) = delete;

    bool await_ready() const noexcept {
      return job_->waiter.load(std::memory_order_acquire) == detail::kDone;
    }
    template <class P>
    bool await_suspend(std::coroutine_handle<P> h) noexcept {
      const TaskContext& ctx = detail::context_of(h);
      waiter_.task = h;
      waiter_.runtime = ctx.runtime != nullptr ? ctx.runtime : job_->runtime;
      // Registered even under the runtime's own token (unlike engine operations): nothing
      // else would end this wait at shutdown, since the job itself cannot be cancelled. A
      // coroutine with no token of its own (not a runtime task) is cancelled by the stop of the
      // runtime that resumes it: a job abandoned at shutdown must find nobody left to resume
      // through that runtime once it is gone.
      const std::stop_token token =
          ctx.token.stop_possible() ? ctx.token : detail::runtime_stop_token(*waiter_.runtime);
      if (token.stop_requested()) {
        cancelled_ = true;
        return false;
      }
      // Before we are published: from then on the pool may resume us on another thread.
      cancel_.emplace(token, Cancel{this});
      void* expected = nullptr;
      if (job_->waiter.compare_exchange_strong(expected, &waiter_, std::memory_order_acq_rel,
                                               std::memory_order_acquire))
        return true;
      cancelled_ = expected == detail::kJoinCancelled;  // else kDone: take the result
      return false;
    }
    T await_resume() {
      cancel_.reset();  // waits for our callback if it is running on another thread
      if (cancelled_) {
        // Let the handle be awaited again: back to "nobody waiting" unless it finished.
        void* expected = detail::kJoinCancelled;
        job_->waiter.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
        throw std::system_error(std::make_error_code(std::errc::operation_canceled),
                                "arbor: wait for a blocking job cancelled");
      }
      auto& result = job_->result;
      if (result.index() == 2) {
        // Taken out, so that the job does not report it as unobserved when it goes.
        std::exception_ptr error = std::move(std::get<2>(result));
        result.template emplace<0>();
        std::rethrow_exception(error);
      }
      if (!job_->ran)
        throw std::system_error(std::make_error_code(std::errc::operation_canceled),
                                "arbor: blocking job dropped unstarted: the runtime shut down");
      if constexpr (!std::is_void_v<T>) return std::move(std::get<1>(result));
    }

   private:
    struct Cancel {
      Awaiter* self;
      void operator()() const noexcept { self->on_stop(); }
    };
    void on_stop() noexcept {
      void* w = job_->waiter.load(std::memory_order_acquire);
      for (;;) {
        if (w == detail::kDone || w == detail::kJoinCancelled) return;  // the pool resumes us
        void* next = w == nullptr ? detail::kJoinCancelled : nullptr;
        if (!job_->waiter.compare_exchange_weak(w, next, std::memory_order_acq_rel,
                                                std::memory_order_acquire))
          continue;
        if (w == nullptr) return;  // not suspended yet: await_suspend sees kJoinCancelled
        // We took ourselves back: nobody else resumes us. Not inline: a stop callback runs on
        // whichever thread requested stop, and a task runs only on the workers.
        cancelled_ = true;
        waiter_.resumer.schedule(*waiter_.runtime, waiter_.task);
        return;
      }
    }

    detail::BlockingResult<T>* job_;
    detail::BlockingWaiter waiter_;
    bool cancelled_ = false;
    std::optional<std::stop_callback<Cancel>> cancel_;
  };

  Awaiter operator co_await() && noexcept { return Awaiter{job_}; }

 private:
  detail::BlockingResult<T>* job_ = nullptr;
};

}  // namespace arbor
