#include "arbor/runtime/runtime.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <system_error>
#include <thread>

#include "arbor/internal/log.hpp"
#include "arbor/io/socket.hpp"
#include "arbor/runtime/error.hpp"
#include "blocking_pool.hpp"

namespace arbor {

namespace {

class ErrorCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "arbor"; }
  std::string message(int code) const override {
    switch (static_cast<Errc>(code)) {
      case Errc::end_of_stream:
        return "end of stream before the expected bytes arrived";
      case Errc::not_in_runtime:
        return "operation awaited outside an arbor runtime task";
      case Errc::channel_closed:
        return "channel closed: the other side is gone or closed it";
      case Errc::channel_full:
        return "channel full: no room for the message now";
      case Errc::channel_empty:
        return "channel empty: no message now";
      case Errc::channel_lagged:
        return "receiver lagged behind the channel and missed messages";
      case Errc::frame_too_long:
        return "line or frame longer than the maximum (nothing was consumed)";
      case Errc::incomplete_frame:
        return "end of stream in the middle of a line or frame";
    }
    return "unknown arbor error";
  }
};

RuntimeOptions options_or_throw() {
  auto options = RuntimeOptions::from_env();
  if (!options) throw std::system_error(options.error(), "arbor: invalid ARBOR_* environment");
  return *options;
}

}  // namespace

const std::error_category& error_category() noexcept {
  static const ErrorCategory category;
  return category;
}

Result<RuntimeOptions> RuntimeOptions::from_env() {
  RuntimeOptions o;
  auto engine = io::EngineOptions::from_env();
  if (!engine) return engine.error();
  o.engine = *engine;
  if (const char* v = std::getenv("ARBOR_WORKERS"); v != nullptr && *v != '\0') {
    const std::string_view s(v);
    int n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc{} || end != s.data() + s.size() || n < 1 || n > 1024) {
      log::error("ARBOR_WORKERS='{}' is not a number in 1..1024", v);
      return std::make_error_code(std::errc::invalid_argument);
    }
    o.scheduler.workers = n;
  }
  if (const char* v = std::getenv("ARBOR_MAX_BLOCKING_THREADS"); v != nullptr && *v != '\0') {
    const std::string_view s(v);
    int n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc{} || end != s.data() + s.size() || n < 1 || n > 4096) {
      log::error("ARBOR_MAX_BLOCKING_THREADS='{}' is not a number in 1..4096", v);
      return std::make_error_code(std::errc::invalid_argument);
    }
    o.blocking.max_threads = n;
  }
  return o;
}

Runtime::Runtime() : Runtime(options_or_throw()) {}

Runtime::Runtime(RuntimeOptions options) : options_(std::move(options)) {
  io::ignore_sigpipe();
  // IoMode::rings (io_uring's default) has every worker park in its own ring: the scheduler is
  // built for it. If io_uring then cannot start after all, "auto" falls back to epoll, which
  // on such a scheduler runs a poller thread (Engine::create()).
  if (io::Engine::default_io_mode(options_.engine) == io::IoMode::rings)
    options_.scheduler.per_worker_parking = true;
  scheduler_ = std::make_unique<sched::Scheduler>(options_.scheduler);
  auto engine = io::Engine::create(*scheduler_, options_.engine);
  if (!engine) {
    scheduler_->stop();
    throw std::system_error(engine.error(),
                            "arbor: engine '" + options_.engine.kind + "' cannot start");
  }
  engine_ = std::move(*engine);
  if (options_.blocking.max_threads < 1) options_.blocking.max_threads = 1;
  // The waits add these to the clock in nanoseconds: milliseconds::max() ("as long as it
  // takes") overflowed to a deadline already past. A century is as long as it takes.
  constexpr std::chrono::milliseconds kLongest = std::chrono::hours(24 * 365 * 100);
  options_.shutdown_timeout = std::min(options_.shutdown_timeout, kLongest);
  options_.blocking.keep_alive = std::min(options_.blocking.keep_alive, kLongest);
  blocking_ = std::make_unique<detail::BlockingPool>(options_.blocking);  // no thread yet
  root_ = TaskContext{this, stop_.get_token(), /*engine_cancels=*/true};
}

Result<std::unique_ptr<Runtime>> Runtime::create(RuntimeOptions options) {
  try {
    return std::make_unique<Runtime>(std::move(options));
  } catch (const std::system_error& e) {
    return e.code();
  }
}

Runtime::~Runtime() {
  shutdown();
  engine_.reset();  // the engine delivers into the scheduler: it goes first
  scheduler_.reset();
}

void Runtime::request_stop() noexcept {
  stop_.request_stop();   // tasks polling the token, with_timeout children, user callbacks
  engine_->cancel_all();  // every operation and sleep under the root context
}

void Runtime::shutdown() noexcept {
  if (sched::Scheduler::current() == scheduler_.get()) {
    // A task cannot wait for a shutdown that has to join its own worker.
    request_stop();
    return;
  }
  {
    std::unique_lock lock(shutdown_mutex_);
    if (phase_ != Phase::running) {
      // Re-entered on the thread doing the shutdown (a stop callback, a task resumed inline by
      // a drop): the outer call finishes the job.
      if (shutting_down_on_ == std::this_thread::get_id()) return;
      // Another thread is shutting down: returning now would let our caller destroy the
      // runtime under it. Wait until it has finished.
      shutdown_progress_.wait(lock, [this] { return phase_ == Phase::shut_down; });
      return;
    }
    phase_ = Phase::shutting_down;
    shutting_down_on_ = std::this_thread::get_id();
  }
  request_stop();
  {
    std::unique_lock lock(shutdown_mutex_);
    const bool finished = shutdown_progress_.wait_for(lock, options_.shutdown_timeout, [this] {
      return live_.load(std::memory_order_acquire) == 0;
    });
    if (!finished)
      log::warn("shutdown: {} task(s) still running after {} ms of cancellation; abandoning them",
                live_.load(), options_.shutdown_timeout.count());
  }
  // After the tasks: their waits on blocking jobs have been cancelled, so no job completing
  // now resumes anyone. Before the scheduler stops, so that one would still resume on it.
  blocking_->shutdown(options_.shutdown_timeout);
  engine_->stop();
  scheduler_->stop();
  // Notify under the lock: a waiter may destroy the runtime as soon as it sees shut_down.
  std::lock_guard lock(shutdown_mutex_);
  phase_ = Phase::shut_down;
  shutdown_progress_.notify_all();
}

int Runtime::blocking_threads() const noexcept {
  return blocking_->threads();
}

void Runtime::submit_blocking(detail::BlockingJob& job) noexcept {
  blocking_->submit(job);
}

void Runtime::task_finished() noexcept {
  if (live_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard lock(shutdown_mutex_);
    shutdown_progress_.notify_all();
  }
}

namespace {
std::atomic<std::uint64_t> unobserved_exceptions{0};
}  // namespace

std::uint64_t unobserved_task_exceptions() noexcept {
  return unobserved_exceptions.load(std::memory_order_relaxed);
}

namespace detail {
void spawned_finished(Runtime& runtime) noexcept {
  runtime.task_finished();
}

void submit_to_workers(Runtime& runtime, sched::WorkItem& item) noexcept {
  runtime.scheduler().submit(item, /*prefer_local=*/false);
}

std::stop_token runtime_stop_token(Runtime& runtime) noexcept {
  return runtime.stop_token();
}

void report_unobserved(const std::exception_ptr& error) noexcept {
  unobserved_exceptions.fetch_add(1, std::memory_order_relaxed);
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    log::error("a detached task ended with an exception nobody joined: {}", e.what());
  } catch (...) {
    log::error("a detached task ended with a non-standard exception nobody joined");
  }
}
}  // namespace detail

}  // namespace arbor
