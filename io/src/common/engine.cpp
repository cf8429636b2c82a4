// Engine and EngineCore: what every backend shares — options, selection, the public members
// (on EngineCore's state: every Engine is one), the poller loop, timers and delivery of event
// batches as trees.
#include "arbor/io/engine.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "arbor/internal/log.hpp"
#include "arbor/io/submit_batch.hpp"
#include "arbor/sched/event_tree.hpp"
#include "common/descriptor.hpp"
#include "common/engine_core.hpp"
#include "common/engine_driver.hpp"
#include "common/engine_table.hpp"
#include "common/poller_policy.hpp"
#include "common/timer_plan.hpp"
#include "common/timer_queue.hpp"

namespace arbor::io {
namespace {

std::error_code invalid() {
  return std::make_error_code(std::errc::invalid_argument);
}

template <class T>
bool parse_number(const char* text, T& out, T lo, T hi) {
  const std::string_view v(text);
  T value{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
  if (ec != std::errc{} || end != v.data() + v.size() || value < lo || value > hi) return false;
  out = value;
  return true;
}

// A 0|1 switch from the environment; unset leaves `out` alone. False (logged) on bad text.
bool parse_switch(const char* name, bool& out) {
  const char* v = std::getenv(name);
  if (v == nullptr) return true;
  const std::string_view s(v);
  if (s == "1" || s == "0") {
    out = s == "1";
    return true;
  }
  log::error("{}='{}' must be 0 or 1", name, v);
  return false;
}

// Wraps every timer so its handler, like every IO completion, runs inside a SubmitBatch.
void fire_timer(const sched::Event& event, sched::Disposition disposition) noexcept {
  auto* timer = static_cast<Timer*>(event.target);
  SubmitBatch batch;
  timer->handler(event, disposition);
}

// "auto, epoll or uring": the names a user may type, for error messages.
std::string known_names() {
  std::string names = "auto";
  for (const EngineEntry* e : engine_table()) {
    names += ", ";
    names += e->name;
  }
  return names;
}

bool known(std::string_view kind) {
  return kind == "auto" || find_engine(kind) != nullptr;
}

}  // namespace

const char* to_string(IoMode mode) noexcept {
  switch (mode) {
    case IoMode::workers:
      return "workers";
    case IoMode::pollers:
      return "pollers";
    case IoMode::rings:
      return "rings";
  }
  return nullptr;
}

Result<std::optional<IoMode>> parse_io_mode(std::string_view text) {
  if (text.empty() || text == "auto") return std::optional<IoMode>{};
  for (IoMode mode : {IoMode::workers, IoMode::pollers, IoMode::rings})
    if (text == to_string(mode)) return std::optional<IoMode>{mode};
  return invalid();
}

std::error_code EngineOptions::validate() const {
  if (!known(kind)) return invalid();
  if (io_mode && to_string(*io_mode) == nullptr) return invalid();
  if (pollers < 1 || pollers > 64) return invalid();
  if (max_batch < 1 || max_batch > 4096) return invalid();
  if (max_tree < 1 || max_tree > 4096) return invalid();
  if (ring_entries < 8 || ring_entries > 32768) return invalid();
  return {};
}

Result<EngineOptions> EngineOptions::from_env(EngineOptions o) {
  if (const char* v = std::getenv("ARBOR_ENGINE"); v != nullptr && *v != '\0') o.kind = v;
  if (const char* v = std::getenv("ARBOR_IO_MODE"); v != nullptr && *v != '\0') {
    auto mode = parse_io_mode(v);
    if (!mode) {
      log::error("ARBOR_IO_MODE='{}' must be auto, workers, pollers or rings", v);
      return mode.error();
    }
    o.io_mode = *mode;
  }
  if (const char* v = std::getenv("ARBOR_POLLERS"); v && !parse_number(v, o.pollers, 1, 64)) {
    log::error("ARBOR_POLLERS='{}' is not a number in 1..64", v);
    return invalid();
  }
  if (const char* v = std::getenv("ARBOR_MAX_BATCH");
      v && !parse_number<std::size_t>(v, o.max_batch, 1, 4096)) {
    log::error("ARBOR_MAX_BATCH='{}' is not a number in 1..4096", v);
    return invalid();
  }
  if (const char* v = std::getenv("ARBOR_MAX_TREE");
      v && !parse_number<std::size_t>(v, o.max_tree, 1, 4096)) {
    log::error("ARBOR_MAX_TREE='{}' is not a number in 1..4096", v);
    return invalid();
  }
  if (!parse_switch("ARBOR_INLINE", o.inline_completions)) return invalid();
  if (!parse_switch("ARBOR_MULTISHOT", o.multishot)) return invalid();
  if (!known(o.kind)) {
    log::error("unknown engine '{}' (ARBOR_ENGINE / --engine): expected {}", o.kind, known_names());
    return invalid();
  }
  return o;
}

Result<EngineOptions> EngineOptions::from_env() {
  return from_env(EngineOptions{});
}

namespace {
// The one place an io mode is decided: the one the options name, else the engine's own default
// (its table entry, chosen by the figures in docs/benchmarks.md), as far as the scheduler
// allows: rings need workers that park per worker, and such workers cannot share one driver
// (workers mode), so there an engine without rings runs a poller thread. `per_worker`: the
// scheduler's per_worker_parking, or nullopt before there is one (a Runtime asks what to build).
IoMode decide_io_mode(const EngineEntry& e, const EngineOptions& o,
                      std::optional<bool> per_worker) noexcept {
  if (o.io_mode) return *o.io_mode;
  if (!per_worker || *per_worker == (e.io_mode == IoMode::rings)) return e.io_mode;
  return *per_worker ? IoMode::pollers : IoMode::workers;
}
}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(sched::Scheduler& scheduler, EngineOptions options) {
  if (!known(options.kind)) {
    log::error("unknown engine '{}': expected {}", options.kind, known_names());
    return invalid();
  }
  if (auto ec = options.validate()) {
    log::error("invalid engine options (pollers 1..64, max_batch and max_tree 1..4096)");
    return ec;
  }
  const auto create_engine = [&](const EngineEntry& e) {
    EngineOptions o = options;
    o.io_mode = decide_io_mode(e, options, scheduler.per_worker_parking());
    return e.create(scheduler, o, true);
  };
  if (options.kind != "auto") return create_engine(*find_engine(options.kind));
  if (engine_table().empty()) {  // a platform whose engine is still to come (Windows today)
    log::error("no IO engine is built for this platform");
    return std::make_error_code(std::errc::function_not_supported);
  }
  std::error_code last = std::make_error_code(std::errc::function_not_supported);
  for (const EngineEntry* e : engine_table()) {
    if (auto why = e->probe()) {
      log::info("{} unavailable ({}); trying the next engine", e->name, why.message());
      last = why;
      continue;
    }
    auto engine = create_engine(*e);
    if (engine) return engine;
    log::info("{} failed to start ({}); trying the next engine", e->name, engine.error().message());
    last = engine.error();
  }
  log::error("no IO engine can run here (built: {})", known_names());
  return last;
}

IoMode Engine::default_io_mode(const EngineOptions& options) {
  if (options.io_mode) return *options.io_mode;
  const EngineEntry* chosen = nullptr;
  if (options.kind != "auto") {
    chosen = find_engine(options.kind);
  } else {
    for (const EngineEntry* e : engine_table())
      if (chosen == nullptr && !e->probe()) chosen = e;
  }
  return chosen != nullptr ? decide_io_mode(*chosen, options, std::nullopt) : IoMode::workers;
}

std::vector<std::string> Engine::names() {
  std::vector<std::string> names;
  for (const EngineEntry* e : engine_table())
    names.emplace_back(e->name);
  return names;
}

std::vector<std::string> Engine::available() {
  std::vector<std::string> names;
  for (const EngineEntry* e : engine_table())
    if (!e->probe()) names.emplace_back(e->name);
  return names;
}

namespace {
// A backend built without Engine::create() (tests do) with no io mode gets the workers'.
EngineOptions with_io_mode(EngineOptions o) {
  if (!o.io_mode) o.io_mode = IoMode::workers;
  return o;
}
}  // namespace

Engine::Engine(sched::Scheduler& scheduler, EngineOptions options)
    : scheduler_(scheduler), options_(with_io_mode(std::move(options))) {}

Engine::~Engine() = default;

EngineCore& Engine::core() noexcept {
  return static_cast<EngineCore&>(*this);
}

const EngineCore& Engine::core() const noexcept {
  return static_cast<const EngineCore&>(*this);
}

EngineCore::EngineCore(sched::Scheduler& scheduler, EngineOptions options)
    : Engine(scheduler, std::move(options)),
      pool_(options_.max_batch * 2),
      timers_(std::make_unique<TimerQueue>()),
      timer_plan_(std::make_unique<TimerPlan>(*timers_)) {}

EngineCore::~EngineCore() {
  if (!pollers_.empty() || ((driver_ != nullptr || worker_drivers_attached_) && !stopping())) {
    log::error(
        "io::Engine destroyed while its pollers run: own engines through "
        "std::unique_ptr<io::Engine>, whose deleter stops them first");
    std::abort();
  }
}

Result<Handle> Engine::handle(DescriptorRef socket) noexcept {
  Descriptor& d = *socket.descriptor;
  std::lock_guard guard(d.lock);
  if (d.generation != socket.generation || d.closed)
    return std::make_error_code(std::errc::bad_file_descriptor);
  return d.fd;
}

std::string describe_polling(const EngineOptions& options) {
  if (options.io_mode == IoMode::rings) return "a ring per worker";
  if (options.io_mode != IoMode::pollers) return "polled by the workers";
  return std::to_string(options.pollers) + " poller thread(s)";
}

bool EngineCore::attach_worker_drivers(sched::WorkerDrivers& drivers) noexcept {
  return scheduler_.attach_worker_drivers(drivers);
}

std::error_code EngineCore::start_polling() noexcept {
  if (options_.io_mode == IoMode::rings) {
    sched::WorkerDrivers* drivers = worker_drivers();
    if (drivers == nullptr) {
      log::error(
          "engine: the {} engine has no io mode 'rings' (a ring per worker is io_uring's); use "
          "workers or pollers",
          name());
      return invalid();
    }
    if (!attach_worker_drivers(*drivers)) {
      log::error(
          "engine: io mode 'rings' needs a scheduler built with per_worker_parking and no other "
          "engine's rings attached to it");
      return std::make_error_code(std::errc::device_or_resource_busy);
    }
    worker_drivers_attached_ = true;
    return {};
  }
  if (options_.io_mode != IoMode::pollers) {
    try {
      driver_ = std::make_unique<EngineDriver>(*this);
    } catch (const std::bad_alloc&) {
      return std::make_error_code(std::errc::not_enough_memory);
    }
    if (!scheduler_.attach_driver(*driver_)) {
      driver_.reset();
      log::error(
          "engine: the scheduler's workers already poll another engine; use "
          "ARBOR_IO_MODE=pollers for a second engine on one scheduler");
      return std::make_error_code(std::errc::device_or_resource_busy);
    }
    return {};
  }
  try {
    pollers_.reserve(static_cast<std::size_t>(options_.pollers));
    for (int p = 0; p < options_.pollers; ++p)
      pollers_.emplace_back([this, p] { run_poller(p); });
  } catch (const std::system_error& e) {
    stop();
    log::error("engine: cannot start poller thread {}: {}", pollers_.size(), e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    stop();
    return std::make_error_code(std::errc::not_enough_memory);
  }
  return {};
}

void Engine::stop() noexcept {
  EngineCore& self = core();
  if (self.stopping_.exchange(true, std::memory_order_acq_rel)) return;
  if (options_.io_mode == IoMode::rings) {
    // Returns once every worker has closed its ring (drained on its own thread); the backend
    // then finishes what was queued for rings that were never opened.
    if (self.worker_drivers_attached_) scheduler_.detach_worker_drivers();
    self.on_drivers_detached();
    return;
  }
  if (self.driver_ != nullptr) {
    // No worker is inside the driver once this returns, so this thread may finish its work.
    scheduler_.detach_driver();
    self.on_poller_stop(0);
    return;
  }
  for (int p = 0; p < static_cast<int>(self.pollers_.size()); ++p)
    self.wake(p);
  for (auto& t : self.pollers_)
    t.join();
  self.pollers_.clear();
}

bool Engine::add_timer(Timer& timer) {
  EngineCore& self = core();
  const auto added = self.timers_->add(timer);
  if (added == TimerQueue::Added::queued_earliest) self.earlier_deadline();
  return added != TimerQueue::Added::cancelled;
}

void Engine::cancel_timer(Timer& timer) noexcept {
  EngineCore& self = core();
  if (!self.timers_->cancel(timer)) return;  // already fired (or never queued): it completes once
  const sched::Event event{&fire_timer, &timer, -ECANCELED, 0};
  self.deliver({&event, 1});
}

void Engine::cancel_all() noexcept {
  if (cancelling_.exchange(true, std::memory_order_acq_rel)) return;
  EngineCore& self = core();
  self.cancel_parked();
  // Shutdown path: allocating here is fine (and if it fails, the timers fire at their time).
  try {
    std::vector<Timer*> timers;
    self.timers_->cancel_all(timers);
    std::vector<sched::Event> events;
    events.reserve(timers.size());
    for (Timer* t : timers)
      events.push_back({&fire_timer, t, -ECANCELED, 0});
    self.deliver(events);
  } catch (const std::bad_alloc&) {
    log::error("cancel_all: out of memory; pending timers will fire at their deadlines");
  }
}

const sched::EventPool& Engine::event_pool() const noexcept {
  return core().pool_;
}

EngineCounters Engine::counters() const noexcept {
  const EngineCore& self = core();
  EngineCounters c;
  c.waits = self.waits_.load(std::memory_order_relaxed);
  c.events = self.events_.load(std::memory_order_relaxed);
  c.trees = self.trees_.load(std::memory_order_relaxed);
  c.largest_batch = self.largest_.load(std::memory_order_relaxed);
  c.wakes = self.wakes_.load(std::memory_order_relaxed);
  c.descriptors = self.descriptors_.load(std::memory_order_relaxed);
  c.timers = self.timers_->size();
  self.backend_counters(c);
  return c;
}

void EngineCore::deliver(std::span<const sched::Event> events, bool keep_first) noexcept {
  if (events.empty()) return;
  events_.fetch_add(events.size(), std::memory_order_relaxed);
  if (options_.inline_completions) {
    for (const auto& e : events)
      e.handler(e, sched::Disposition::run);
    return;
  }
  // Exactly once even if the pool cannot grow: the events it cannot carry run here, in place.
  trees_.fetch_add(
      sched::submit_event_trees(scheduler_, pool_, events, options_.max_tree, keep_first),
      std::memory_order_relaxed);
}

void EngineCore::run_poller(int poller) noexcept {
  const std::size_t k = options_.max_batch;
  // Poller 0's batches have room for K IO events and up to K expired timers.
  const std::size_t timer_room = poller == 0 ? k : 0;
  std::vector<sched::Event> events(k + timer_room);
  std::vector<Timer*> fired(timer_room);
  PollerPolicy policy;  // platform-specific (common/poller_policy.hpp)
  on_poller_start(poller);
  while (!stopping()) {
    const std::size_t n = reap(poller, -1, events, fired);
    policy.observe(scheduler_.parked_workers() < scheduler_.workers(), n);
    deliver({events.data(), n});
  }
  on_poller_stop(poller);
}

std::size_t EngineCore::reap(int poller, std::int64_t timeout_ns, std::span<sched::Event> events,
                             std::span<Timer*> fired) noexcept {
  const std::size_t k = options_.max_batch;
  // Poller 0 watches the timers (timer_plan.hpp says how it sleeps and when a paused clock jumps).
  TimerPlan::Wait plan;
  // idle() walks every worker's queue: asked only while a test has paused the clock.
  if (poller == 0) plan = timer_plan_->before_wait(timeout_ns, clock_paused() && scheduler_.idle());
  std::size_t n = wait(poller, poller == 0 ? plan.timeout_ns : timeout_ns, events.first(k));
  waits_.fetch_add(1, std::memory_order_relaxed);
  // Timers go into every batch, full or not: taking them only when a wait left room starved
  // them under load (K = 1: a 10 ms timer had not fired after seconds of single-event waits).
  // Nothing is due before the deadline armed above: a timer added during the wait with an
  // earlier one woke us and re-armed, so the next wait is a poll and hands it over.
  if (plan.deadline != TimerPlan::kNever) {
    if (n == 0)
      timer_plan_->after_empty_wait(
          plan, [&] { return scheduler_.idle() && !completions_ready(); },
          plan.paused && completion_work_on_sleepers() ? &scheduler_ : nullptr);
    else
      timer_plan_->reaped();
    // The earliest deadline now (the hint is at least as new as the arm() in before_wait() or a
    // jump, both on this thread): a jump, or a timer added during the wait, may have moved it.
    const std::int64_t now = now_ns();
    if (std::min(plan.deadline, timers_->earliest()) <= now) {
      const std::size_t t = timers_->pop_expired(now, fired.data(), fired.size());
      for (std::size_t i = 0; i < t; ++i)
        events[n++] = {&fire_timer, fired[i], 0, 0};
    }
  }
  if (n > largest_.load(std::memory_order_relaxed)) largest_.store(n, std::memory_order_relaxed);
  return n;
}

std::size_t EngineCore::take_expired_timers(std::int64_t now, std::span<sched::Event> out,
                                            std::span<Timer*> scratch) noexcept {
  const std::size_t max = std::min(out.size(), scratch.size());
  const std::size_t t = timers_->pop_expired(now, scratch.data(), max);
  for (std::size_t i = 0; i < t; ++i)
    out[i] = {&fire_timer, scratch[i], 0, 0};
  return t;
}

void EngineCore::count_wait(std::size_t events) noexcept {
  waits_.fetch_add(1, std::memory_order_relaxed);
  if (events > largest_.load(std::memory_order_relaxed))
    largest_.store(events, std::memory_order_relaxed);
}

}  // namespace arbor::io

void std::default_delete<arbor::io::Engine>::operator()(arbor::io::Engine* engine) const noexcept {
  engine->stop();  // while the backend still exists: its pollers call into it until joined
  delete engine;
}
