// Engine: the one interface every IO backend implements (epoll and io_uring on Linux; kqueue
// and IOCP map onto it as docs/architecture.md describes). Which backends exist is decided in
// one place, the engine table (io/src/common/engine_table.cpp); this header names none.
//
// The interface is completion-shaped: start an Operation, get its result once. A readiness
// backend gets there by trying the system call, waiting for readiness when it would block, and
// retrying on a worker; a completion backend hands the operation to the kernel. Either way a
// wait harvests at most `max_batch` events, copies each into a pooled event item, and submits
// them to the scheduler as balanced trees of at most `max_tree` items with one push per batch
// (sched/event_tree.hpp). Who waits depends on the io mode: by default the scheduler's workers
// (the engine is the scheduler's Driver, sched/driver.hpp: a worker with nothing to run waits
// in the kernel and runs the first tree it reaps itself), or dedicated poller threads that hand
// every batch to the workers, or (io_uring only) a ring per worker, each worker parked in its
// own (the engine is the scheduler's WorkerDrivers, sched/worker_driver.hpp). Timers live
// here too: whoever waits on the first epoll set or ring sleeps until the earliest deadline
// and adds the expired timers to every batch (with a ring per worker: one sleeping ring, the
// holder of the timer watch, io/src/common/timer_watch.hpp).
//
// Per socket, at most one read-side operation (receive, accept, receive_from) and one
// write-side operation (send, send_vectored, connect, send_to) may be pending at a time; a
// second one completes at once with -EBUSY.
//
// Ownership: an Engine is owned through std::unique_ptr<Engine>, whose deleter (specialised
// below) stops the pollers while the whole object still exists, so no backend's destructor has
// to remember to.
//
// This header holds what users call. What the backends implement and share (the hooks of each
// backend, the poller loop, delivery as trees, the timer queue, their state) is io's private
// EngineCore (io/src/common/engine_core.hpp): the one class that derives from Engine (its
// constructor is private to it), and the base of every backend.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "arbor/io/operation.hpp"
#include "arbor/io/timer.hpp"
#include "arbor/result.hpp"

namespace arbor::sched {
class EventPool;
class Scheduler;
}  // namespace arbor::sched

namespace arbor::io {
class Engine;
class EngineCore;
}  // namespace arbor::io

/// Deleting an Engine stops it first. stop() calls into the backend (wake()), which a base
/// destructor cannot do: by then the backend part is gone and its pollers may still be in it.
template <>
struct std::default_delete<arbor::io::Engine> {
  constexpr default_delete() noexcept = default;
  template <std::derived_from<arbor::io::Engine> U>
  default_delete(const default_delete<U>&) noexcept {}  // NOLINT: implicit, like the original's
  void operator()(arbor::io::Engine* engine) const noexcept;
};

namespace arbor::io {

/// Who waits in the kernel for completions.
enum class IoMode {
  /// The scheduler's idle workers, one at a time, on one epoll set or ring; completions run on
  /// the worker that reaped them.
  workers,
  /// `pollers` dedicated threads, each handing what it reaps to the workers.
  pollers,
  /// A ring per scheduler worker, created, submitted to, reaped and destroyed on its worker's
  /// thread; each worker parks in its own ring (the scheduler must be built with
  /// SchedulerOptions::per_worker_parking). io_uring only: the other engines refuse it.
  rings,
};

/// "workers", "pollers" or "rings"; nullptr for anything else.
const char* to_string(IoMode mode) noexcept;
/// IoMode from "workers", "pollers" or "rings"; "auto" (or "") is nullopt, the engine's own
/// default; anything else is invalid_argument.
Result<std::optional<IoMode>> parse_io_mode(std::string_view text);

struct EngineOptions {
  /// "auto" (the first engine of Engine::names() that can run here) or one of Engine::names().
  std::string kind = "auto";
  /// Who waits in the kernel (see IoMode). Unset: the engine's own default, chosen by the
  /// figures in docs/benchmarks.md (io_uring: rings; epoll: workers; IOCP: pollers), as far as
  /// the scheduler allows: rings need one built with per_worker_parking (Runtime builds it so
  /// when default_io_mode() says rings), and there epoll runs a poller thread; io_uring on a
  /// scheduler without it runs in workers mode. Engine::create() fills it in, so an engine's
  /// options() always hold the mode it runs in.
  std::optional<IoMode> io_mode;
  /// Poller threads in IoMode::pollers (each with its own epoll set or ring; sockets are spread
  /// round-robin). Workers mode has one epoll set or ring and ignores this, and so does rings
  /// mode (a ring per scheduler worker).
  int pollers = 1;
  /// K: IO events harvested per wait, 1..4096. Poller 0 adds up to K expired timers to each
  /// batch, so a batch holds at most 2K events.
  std::size_t max_batch = 256;
  /// B: items per event tree, 1..4096.
  std::size_t max_tree = 16;
  /// Run completions on the poller thread instead of handing them to the scheduler. For
  /// measuring the hand-off; not for production (a slow handler stalls every socket).
  bool inline_completions = false;
  /// Completion engines: submission queue entries (io_uring's SQ), 8..32768.
  unsigned ring_entries = 1024;
  /// Completion engines: let one kernel operation serve many accepts or receives (io_uring's
  /// multishot accept and receive into provided buffers) where the kernel has it.
  bool multishot = true;

  /// Reads ARBOR_ENGINE, ARBOR_IO_MODE, ARBOR_POLLERS, ARBOR_MAX_BATCH, ARBOR_MAX_TREE,
  /// ARBOR_INLINE and ARBOR_MULTISHOT over
  /// `defaults`. A bad value is an error naming the variable (invalid_argument).
  static Result<EngineOptions> from_env(EngineOptions defaults);
  static Result<EngineOptions> from_env();
  /// invalid_argument if a field is out of range or `kind` is not a known engine name.
  std::error_code validate() const;
};

struct EngineCounters {
  std::uint64_t waits = 0;   // poller waits that returned
  std::uint64_t events = 0;  // completions and fired timers delivered
  std::uint64_t trees = 0;   // event trees submitted
  std::uint64_t largest_batch = 0;
  std::uint64_t wakes = 0;        // poller wake-ups sent from other threads
  std::uint64_t descriptors = 0;  // sockets attached now
  std::uint64_t timers = 0;       // timers pending now

  /// What only the running engine counts (io_uring: submits, multishot_arms, buffered_reads),
  /// each with a name and a one-line help text, for /metrics.
  struct Named {
    const char* name = "";
    const char* help = "";
    std::uint64_t value = 0;
  };
  static constexpr std::size_t kMaxNamed = 6;
  Named named[kMaxNamed];
  std::size_t named_count = 0;

  /// The named counter `name`, or 0 if this engine does not count it.
  std::uint64_t get(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < named_count; ++i)
      if (name == named[i].name) return named[i].value;
    return 0;
  }
  /// Backends: records a named counter (ignored beyond kMaxNamed).
  void add(const char* name, const char* help, std::uint64_t value) noexcept {
    if (named_count < kMaxNamed) named[named_count++] = {name, help, value};
  }
};

class Engine {
 public:
  /// Creates the engine `options.kind` names, delivering to `scheduler`. Errors: unknown name
  /// or bad option (invalid_argument); the named engine cannot start here (its system error).
  /// With "auto", each engine that fails to start falls back to the next one. Logs one line
  /// saying what was chosen. In IoMode::workers a scheduler drives one engine:
  /// device_or_resource_busy if another workers-mode engine is attached to it.
  static Result<std::unique_ptr<Engine>> create(sched::Scheduler& scheduler,
                                                EngineOptions options = {});
  /// The io mode create() would choose for `options` on a scheduler built with
  /// per_worker_parking: `options.io_mode` if set, else the default of the engine it names
  /// ("auto": of the first engine that can run here). What a Runtime asks before it builds its
  /// scheduler. Unknown names: workers (create() then reports them).
  static IoMode default_io_mode(const EngineOptions& options);
  /// Every engine built into this library, preferred first (e.g. uring, epoll).
  static std::vector<std::string> names();
  /// The engines of names() that can run on this machine, preferred first.
  static std::vector<std::string> available();

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  virtual const char* name() const noexcept = 0;
  const EngineOptions& options() const noexcept { return options_; }

  /// Takes ownership of `handle` (makes it non-blocking and registers it as the engine needs)
  /// and names it. On error the handle is closed.
  virtual Result<DescriptorRef> attach(Handle handle) noexcept = 0;
  /// attach() for a connected stream socket that arbor itself opened or accepted, so already
  /// non-blocking (SOCK_NONBLOCK, accept4's flags, or their Windows equivalents): the engine
  /// skips the checks attach() makes of a socket it knows nothing about (on Linux, four system
  /// calls per connection: fcntl twice, getsockopt twice). Ownership as attach().
  virtual Result<DescriptorRef> attach_stream(Handle handle) noexcept { return attach(handle); }
  /// Starts `op` on the socket it names; see operation.hpp for the completion contract. A stale
  /// name (the socket was closed) finishes inline with -ECANCELED.
  virtual bool start(Operation& op) noexcept = 0;
  /// Runs a receive `op` once, now, on the calling thread, and never waits: returns the bytes
  /// received (0: the peer's end), -EAGAIN if nothing is there yet, or another -errno (a stale
  /// name or closed socket: -ECANCELED; a read already pending on the socket: -EBUSY). `op` is
  /// never pending: the engine keeps no pointer to it and never calls op.complete.
  virtual std::int64_t receive_now(Operation& op) noexcept = 0;
  /// Asks a pending `op` to finish early with -ECANCELED. Safe to race with its completion;
  /// the operation still completes exactly once.
  virtual void cancel(Operation& op) noexcept = 0;
  /// Closes the socket: when it returns the kernel no longer serves it (a listener refuses
  /// connects and its port can be bound again, a stream's peer sees the end), even if another
  /// thread's ring still holds a request on it. Its pending operations complete with
  /// -ECANCELED; later ones started with its name do too. A stale name (already closed) does
  /// nothing, even if the descriptor now serves another socket. The handle is the engine's
  /// to close, now or once the last call or request on it lets go; the caller must not use it.
  virtual void close(DescriptorRef socket) noexcept = 0;
  /// The handle behind a socket's name (for socket options); bad_file_descriptor if the name
  /// is stale or the socket closed. Racing a close of the same socket is the caller's business.
  static Result<Handle> handle(DescriptorRef socket) noexcept;

  /// Queues a timer; it is delivered (handler, target=&timer, result 0) at or after its
  /// deadline, exactly once. Returns false, delivering nothing, if cancel_timer() already ran.
  bool add_timer(Timer& timer);
  /// Delivers a queued timer now with -ECANCELED; a timer not yet added will not be added.
  void cancel_timer(Timer& timer) noexcept;

  /// Cancels every pending operation and timer (they complete with -ECANCELED) and refuses
  /// every later one the same way. For shutdown: it is how a runtime cancels its tasks' IO
  /// without each operation registering on a shared stop_token (see docs/architecture.md).
  void cancel_all() noexcept;
  /// Whether cancel_all() has run.
  bool cancelling() const noexcept { return cancelling_.load(std::memory_order_acquire); }

  /// Stops polling: joins the poller threads, or detaches from the scheduler's workers (then
  /// never from one of them: it aborts). Pending operations stay pending; cancel them first.
  void stop() noexcept;

  /// The pool of event work items completions travel in (for metrics; its members are in
  /// arbor/sched/event_pool.hpp).
  const sched::EventPool& event_pool() const noexcept;
  EngineCounters counters() const noexcept;
  sched::Scheduler& scheduler() noexcept { return scheduler_; }

 protected:
  /// Only the owner's deleter destroys an engine, after stop() (EngineCore's destructor aborts,
  /// with a message, if the pollers still run).
  virtual ~Engine();

 private:
  // Every Engine is an EngineCore: it is the one class that may construct one. So the members
  // above that need the backends' shared state reach it through core() (engine.cpp), and
  // EngineCore reaches the state kept here.
  friend class EngineCore;
  friend struct std::default_delete<Engine>;
  Engine(sched::Scheduler& scheduler, EngineOptions options);
  EngineCore& core() noexcept;
  const EngineCore& core() const noexcept;

  sched::Scheduler& scheduler_;
  const EngineOptions options_;
  std::atomic<bool> cancelling_{false};
};

}  // namespace arbor::io
