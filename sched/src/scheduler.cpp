// The worker loop and the wake protocol.
//
// idle_state_ packs (unparked << 16 | searching). A worker is "searching" while it steals or
// spins; "unparked" while it is not asleep on sleepers_ (running, searching or blocked).
//
// The invariant the protocol keeps (checked by the Promela model sched/model/park_notify.pml,
// whose step names S1..S4, P1..P4, T1 and T2 the code below carries in comments), with
// "asleep" = workers between P1 and their return from P4 that did not come back at P3, and
// "pending" = wakes counted at S3 whose signal no wait() has consumed yet:
//   pending   <= asleep                 (every counted wake has a sleeper to consume it)
//   unparked  == N - asleep + pending
//   searching == workers with `searching` set + pending
// A worker leaves the unparked count only at P1 and comes back only by consuming a signal
// (P4, where it inherits the count its waker added at S3) or by counting itself back in at P3
// under the same rule a waker uses, which holds only while nothing is pending. So there is no
// "phantom" searcher: a pending wake holding the searcher cap with nobody to take it.
//
// No lost wakeups — the Dekker pattern between a submitter and a worker about to park:
//   submitter: S1 push the item; S2 fence(seq_cst), load idle_state_; S3 count a wake if
//              nobody searches and fewer than N workers are awake; S4 post its signal.
//   parker:    P1 idle_state_ -= unparked (and searching); P2 fence(seq_cst), re-check every
//              queue; P3 if anything is queued, count itself back in as a searcher under S3's
//              rule, else (someone searches, or enough are awake) P4 sleep; P4 sleep.
// The two fences order the pair: either the submitter sees the parker still awake (and the
// parker then sees the item at P2), or the submitter sees it parked and wakes a sleeper.
// The fences are invisible to ThreadSanitizer; the model checks the interleavings and
// SchedulerSeams.ParkRaceNeverStrandsStealableWork stresses them in the release suite. We keep
// a fence + load rather than a read-modify-write on the submit path so that the common "is
// anybody searching?" check leaves idle_state_'s cache line shared among workers.
//
// A woken worker is counted as unparked + searching by its waker (S3), before it even runs,
// so concurrent submitters do not wake a second one for the same work.
//
// Where a parker sleeps (P4) and how a waker reaches it (S4) is the Parking's (parking.hpp),
// chosen once at construction: SharedParking (shared_parking.cpp: one semaphore and one
// Driver waited in by the holder of the poll right, with the driver bit in idle_state_) or
// PerWorkerParking (per_worker_parking.cpp: a parker per worker, sleepers on a stack). Both
// keep the counts and rules above; each file says what it adds.
//
// Searchers bound: at most half the workers (at least one) search at once (T1). When the last
// searcher finds work it wakes one more sleeper (T2), since more work may be queued behind it;
// so a burst wakes workers one at a time, each only once the previous one has found something.
#include "arbor/sched/scheduler.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "arbor/sched/local_queue.hpp"
#include "arbor/sched/test_hooks.hpp"
#include "cycle_clock.hpp"
#include "global_batch.hpp"
#include "per_worker_parking.hpp"
#include "shared_parking.hpp"
#include "tail_history.hpp"
#include "worker.hpp"

namespace arbor::sched {

namespace detail {
std::atomic<void (*)()> inside_park_hook{nullptr};
std::atomic<void (*)()> tail_clock_start_hook{nullptr};
std::atomic<void (*)()> before_park_count_hook{nullptr};
std::atomic<void (*)()> before_park_sleep_hook{nullptr};
std::atomic<void (*)()> release_unwoken_hook{nullptr};
std::atomic<void (*)()> release_woke_hook{nullptr};
std::atomic<void (*)()> after_park_wake_hook{nullptr};
std::atomic<void (*)()> before_sleeper_claim_hook{nullptr};
std::atomic<void (*)()> spare_started_hook{nullptr};
}  // namespace detail

namespace {

using detail::kSearchingOne;
using detail::kUnparkedOne;
using detail::searching_of;
using detail::unparked_of;

// How often a worker looks at the global queue before its own, so that a worker busy with a
// chain of local items cannot starve what was queued globally (the figure Tokio uses).
constexpr std::uint32_t kGlobalQueueInterval = 61;

// How many items a busy worker runs between two looks into the driver, so that completions do
// not wait for a worker to run out of work (Tokio's event_interval; measured in
// docs/benchmarks.md; ARBOR_POLL_INTERVAL exists only so perf/ can build other values side by
// side).
#ifndef ARBOR_POLL_INTERVAL
#define ARBOR_POLL_INTERVAL 61
#endif
constexpr std::uint32_t kPollInterval = ARBOR_POLL_INTERVAL;
static_assert(kPollInterval >= 1, "a busy worker must look into the driver at some interval");

// How many items have left a worker's own queue (`local`) or the global queue so far. A timed
// tail during which this moved for the queue its item went to saw queued work taken by another
// worker (see submit()); conservative: an older item or another worker's global item counts too.
std::uint64_t items_taken(const LocalQueue& own, const GlobalQueue& global, bool local) noexcept {
  return local ? static_cast<std::uint64_t>(own.oldest_position()) : global.pops();
}

}  // namespace

void test_hooks::set_inside_park(void (*hook)()) noexcept {
  detail::inside_park_hook.store(hook, std::memory_order_relaxed);
}

void test_hooks::set_tail_clock_start(void (*hook)()) noexcept {
  detail::tail_clock_start_hook.store(hook, std::memory_order_relaxed);
}

void test_hooks::set_before_park_count(void (*hook)()) noexcept {
  detail::before_park_count_hook.store(hook, std::memory_order_relaxed);
}

void test_hooks::set_before_park_sleep(void (*hook)()) noexcept {
  detail::before_park_sleep_hook.store(hook, std::memory_order_relaxed);
}

void test_hooks::set_release_unwoken(void (*hook)()) noexcept {
  detail::release_unwoken_hook.store(hook, std::memory_order_relaxed);
}

void test_hooks::set_release_woke(void (*hook)()) noexcept {
  detail::release_woke_hook.store(hook, std::memory_order_relaxed);
}

void test_hooks::set_after_park_wake(void (*hook)()) noexcept {
  detail::after_park_wake_hook.store(hook, std::memory_order_relaxed);
}

void test_hooks::set_spare_started(void (*hook)()) noexcept {
  detail::spare_started_hook.store(hook, std::memory_order_relaxed);
}

void test_hooks::set_before_sleeper_claim(void (*hook)()) noexcept {
  detail::before_sleeper_claim_hook.store(hook, std::memory_order_relaxed);
}

Scheduler::Worker*& Scheduler::this_worker() noexcept {
  thread_local Worker* worker = nullptr;
  return worker;
}

void Scheduler::abort_if_on_worker(const char* function) const noexcept {
  if (current() != this) return;
  // A bug in the caller, not a runtime condition: the call would wait for its own thread.
  std::fprintf(stderr, "arbor::sched::Scheduler::%s() called from one of its own workers\n",
               function);
  std::abort();
}

Scheduler* Scheduler::current() noexcept {
  Worker* w = this_worker();
  return w != nullptr ? &w->owner : nullptr;
}

bool Scheduler::work_queued_here() noexcept {
  Worker* w = this_worker();
  return w != nullptr && w->queue.size_estimate() != 0;
}

namespace {
int checked_workers(const SchedulerOptions& options) {
  int n = options.workers.value_or(static_cast<int>(sync::available_cpus()));
  if (n <= 0)
    throw std::invalid_argument("arbor::sched::Scheduler: workers must be at least 1, got " +
                                std::to_string(n));
  return n;
}
int checked_max_workers(const SchedulerOptions& options, int workers) {
  int spares = options.max_spare_workers.value_or(workers);
  if (spares < 0)
    throw std::invalid_argument(
        "arbor::sched::Scheduler: max_spare_workers must not be negative, got " +
        std::to_string(spares));
  if (workers + spares > 0x7fff)
    throw std::invalid_argument("arbor::sched::Scheduler: at most 32767 workers and spares");
  return workers + spares;
}
}  // namespace

Scheduler::Scheduler(SchedulerOptions options)
    : workers_(checked_workers(options)),
      max_workers_(checked_max_workers(options, workers_)),
      spin_config_(options.spin ? *options.spin : sync::SpinConfig::from_env()),
      cpus_(sync::available_cpus()),
      short_local_ticks_(detail::ticks_per_microsecond()),
      short_global_ticks_(detail::ticks_per_microsecond() / 2),
      idle_state_(static_cast<std::uint32_t>(workers_) * kUnparkedOne),
      per_worker_(options.per_worker_parking) {
#if !defined(__linux__)
  // It serves io_uring's ring per worker. Off Linux its fake-driver tests hang under wine (not
  // investigated): refused rather than shipped untested.
  if (options.per_worker_parking)
    throw std::invalid_argument(
        "arbor::sched::Scheduler: per_worker_parking exists only on Linux (io_uring's rings)");
#endif
  if (options.local_queue_capacity == 0 || options.local_queue_capacity > (1u << 20))
    throw std::invalid_argument(
        "arbor::sched::Scheduler: local_queue_capacity must be in 1..1048576");
  if (per_worker_) {
    parking_ = std::make_unique<PerWorkerParking>(*this);
  } else {
    parking_ = std::make_unique<SharedParking>(*this);
  }
  slots_.reserve(static_cast<std::size_t>(max_workers_));
  for (int i = 0; i < max_workers_; ++i)
    slots_.push_back(std::make_unique<Worker>(*this, static_cast<std::size_t>(i),
                                              options.local_queue_capacity, spin_config_,
                                              static_cast<std::size_t>(max_workers_)));
  // Publish the slots before any thread can look at them (thieves read started_ with acquire).
  started_.store(workers_, std::memory_order_release);
  for (int i = 0; i < workers_; ++i)
    start_worker(static_cast<std::size_t>(i));
}

Scheduler::~Scheduler() {
  stop();
}

void Scheduler::start_worker(std::size_t index) {
  Worker& w = *slots_[index];
  w.thread = std::thread([this, &w] { run_worker(w); });
}

detail::CounterBlock& Scheduler::counter_block() noexcept {
  Worker* w = this_worker();
  return (w != nullptr && &w->owner == this) ? w->counters : external_counters_;
}

bool Scheduler::submit(WorkItem& item, bool prefer_local, std::uint64_t weight) noexcept {
  Worker* w = this_worker();
  const bool on_worker = w != nullptr && &w->owner == this;
  if (!on_worker) submitters_.fetch_add(1, std::memory_order_seq_cst);
  // seq_cst pairs with stop(): it sets stopping_ and then waits for submitters_ to drain, so
  // either we see stopping_ or stop() sees us and waits until our item is queued.
  if (stopping_.load(std::memory_order_seq_cst)) {
    if (!on_worker) submitters_.fetch_sub(1, std::memory_order_release);
    item.fn(&item, Disposition::drop);
    return false;
  }
  if (on_worker) {
    w->counters.bump(detail::CounterBlock::submitted, weight);
    if (w->blocking != 0) {
      // Inside a BlockingRegion this worker will not run the item next: queue it for everyone
      // and wake a helper now, as an external submit does.
      global_.push(&item);  // S1
      notify_parked();
      return true;
    }
    // Read before the push, so that a worker taking the item right after it is seen (below);
    // only by a submit that may start timing a tail (the conditions below): the global count
    // is a line other workers write, not worth a miss on every submit.
    const bool may_time =
        !w->notify_deferred && !w->first_woken && w->running != nullptr && !w->timing_tail;
    const std::uint64_t taken = may_time ? items_taken(w->queue, global_, prefer_local) : 0;
    if (prefer_local) {
      push_local(*w, &item);
    } else {
      global_.push(&item);
    }
    // "Queue one item, then return" is the common shape: this worker runs that item itself a
    // moment later, so waking a sleeper would cost a system call for nothing (and, on a busy
    // machine, can hand the waker's core to the sleeper). So the wake for a running item's
    // first queued item may be left to the item's end, but only on evidence: the item must
    // have been timed before and have returned soon after queueing its first item, by itself
    // (TailHistory). An item never seen, or known to keep running, wakes a helper now: its
    // work would otherwise wait for a tail of unknown length while a worker sleeps. A second
    // item is a surplus and gets a helper now too. Searchers see a deferred item either way
    // (steal_work()).
    //
    // "By itself": a tail is timed from the first queued item to the item's return, and one
    // during which another worker took from the queue that item went to counts as long
    // (run_worker()). Such a tail may have been short only because the helper woken for it ran
    // the work: a parent that waits for its child returns at once when it lost its core after
    // the wake and the helper ran the child meanwhile. Taken as evidence, it would defer the
    // parent's next child with nobody else awake, and the parent would wait for it forever.
    //
    // A global item is deferred only for a shorter tail than a local one: the report's
    // "queue the reply globally, then do housekeeping" hands the reply to everyone, and it may
    // not even be the next item this worker runs (others may be ahead of it in the queue).
    if (w->notify_deferred || w->first_woken) {
      notify_parked();
      return true;
    }
    if (w->running == nullptr) {
      // Outside any item (dispatch()): settled there, as an item's end does.
      w->notify_deferred = true;
      return true;
    }
    const auto habit =
        w->tails.habit(w->running, prefer_local ? short_local_ticks_ : short_global_ticks_);
    if (habit == detail::TailHistory::Habit::short_tail) {
      w->notify_deferred = true;
    } else {
      w->first_woken = true;
      notify_parked();
    }
    // Time this item's tail, from this its first queued item (later ones return above), if it
    // is unknown (so that its next run can be deferred), else on one run in eight: two clock
    // reads per item would cost more than the habit is worth. The clock starts after the wake:
    // its system call is the scheduler's cost, not the item's.
    if (!w->timing_tail &&
        (habit == detail::TailHistory::Habit::unknown || (++w->samples & 7) == 0)) {
      w->timing_tail = true;
      w->tail_local = prefer_local;
      w->tail_taken = taken;
      if (auto* hook = detail::tail_clock_start_hook.load(std::memory_order_relaxed)) hook();
      w->queued_at = detail::cycle_ticks();
    }
    return true;
  }
  external_counters_.add(detail::CounterBlock::submitted, weight);
  global_.push(&item);  // S1
  // Notify before leaving submitters_: once it is zero, stop() may finish and the scheduler
  // be destroyed, so nothing here may touch it afterwards.
  notify_parked();
  submitters_.fetch_sub(1, std::memory_order_release);
  return true;
}

bool Scheduler::submit_batch(WorkItem* first, WorkItem* last, std::size_t count,
                             std::uint64_t weight) noexcept {
  Worker* w = this_worker();
  const bool on_worker = w != nullptr && &w->owner == this;
  if (!on_worker) submitters_.fetch_add(1, std::memory_order_seq_cst);
  if (stopping_.load(std::memory_order_seq_cst)) {
    if (!on_worker) submitters_.fetch_sub(1, std::memory_order_release);
    for (WorkItem* item = first; item != nullptr;) {
      WorkItem* next = item == last ? nullptr : item->next;
      item->fn(item, Disposition::drop);
      item = next;
    }
    return false;
  }
  counter_block().add(detail::CounterBlock::submitted, weight);
  global_.push_batch(first, last, count);  // S1
  notify_parked();                         // before leaving submitters_, as in submit()
  if (!on_worker) submitters_.fetch_sub(1, std::memory_order_release);
  return true;
}

void Scheduler::push_local(Worker& w, WorkItem* item) noexcept {
  if (w.queue.push(item)) return;
  // Overflow: hand the older half to everyone in one global push, keep the newer (hotter) half.
  std::size_t count = 0;
  WorkItem* first = w.queue.take_older_half(count);
  if (first != nullptr) {
    WorkItem* last = first;
    while (last->next != nullptr)
      last = last->next;
    global_.push_batch(first, last, count);
  }
  if (!w.queue.push(item)) global_.push(item);  // capacity 1 corner: nothing to move
}

bool Scheduler::notify_parked(bool* woke, bool handover) noexcept {
  // S2. Pairs with the fence in a park's P2; see the protocol at the top of this file.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return parking_->wake(idle_state_.load(std::memory_order_relaxed), woke, handover);
}

bool Scheduler::transition_to_searching(Worker& w) noexcept {  // T1
  if (w.searching) return true;
  std::uint32_t s = idle_state_.load(std::memory_order_relaxed);
  for (;;) {
    if (2 * searching_of(s) >= static_cast<std::uint32_t>(workers_)) return false;
    if (idle_state_.compare_exchange_weak(s, s + kSearchingOne, std::memory_order_seq_cst,
                                          std::memory_order_relaxed))
      break;
  }
  w.searching = true;
  return true;
}

void Scheduler::transition_from_searching(Worker& w) noexcept {  // T2
  w.searching = false;
  std::uint32_t prev = idle_state_.fetch_sub(kSearchingOne, std::memory_order_seq_cst);
  // The last searcher found work: there may be more behind it, and nobody is looking now.
  if (searching_of(prev) == 1) notify_parked();
}

WorkItem* Scheduler::find_work(Worker& w) noexcept {
  WorkItem* item = nullptr;
  if (++w.tick % kGlobalQueueInterval == 0) {
    // Fairness: one item from the global queue (one, not a batch: the local queue is busy).
    if ((item = global_.pop()) != nullptr) return item;
    // Failing that, our own oldest item if it has waited since the previous check: a batch
    // (below) moves global items under any newer local work, and a chain of that work must not
    // keep them waiting longer than the global queue would have.
    if ((item = take_waiting_oldest(w.queue, w.seen_own_oldest)) != nullptr) return item;
  }
  if ((item = w.queue.pop()) != nullptr) return item;
  // Our fair share of the global queue in one lock; the rest of it waits in our local queue.
  if ((item = pop_global_batch(global_, w.queue, static_cast<std::size_t>(workers_))) != nullptr)
    return item;
  return steal_work(w);
}

// A searcher takes only work that has waited: the oldest item of a queue whose oldest item has
// not moved since the searcher's previous probe. An item its owner is about to run (the usual
// "queue, then return" hand-off) is gone by then and stays on its cache-warm core; an item
// stuck behind a busy owner is taken one probe interval (a few hundred ns) later.
WorkItem* Scheduler::steal_work(Worker& w) noexcept {
  const int n = started_.load(std::memory_order_acquire);
  if (!transition_to_searching(w)) return nullptr;
  if (!global_.empty()) {
    const std::uint64_t pops = global_.pops();
    if (pops == w.seen_global_pops) {
      if (WorkItem* item = pop_global_batch(global_, w.queue, static_cast<std::size_t>(workers_)))
        return item;
    }
    w.seen_global_pops = pops;
  }
  if (n <= 1) return nullptr;
  const auto count = static_cast<std::uint32_t>(n);
  const std::uint32_t start = w.rng.below(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t v = (start + i) % count;
    Worker& victim = *slots_[v];
    if (&victim == &w || victim.queue.size_estimate() == 0) continue;
    const std::int64_t oldest = victim.queue.oldest_position();
    if (oldest != w.seen_oldest[v]) {
      w.seen_oldest[v] = oldest;
      continue;
    }
    if (WorkItem* item = victim.queue.steal()) {
      w.counters.bump(detail::CounterBlock::steals);
      return item;
    }
  }
  return nullptr;
}

WorkItem* Scheduler::spin_for_work(Worker& w) noexcept {
  if (!transition_to_searching(w)) return nullptr;  // enough others are already looking
  const std::uint32_t s = idle_state_.load(std::memory_order_relaxed);
  const int others =
      static_cast<int>(unparked_of(s)) - blocked_.load(std::memory_order_relaxed) - 1;
  const auto budget = w.spinner.budget(others > 0 ? static_cast<unsigned>(others) : 0u, cpus_);
  if (budget <= std::chrono::nanoseconds::zero()) return nullptr;

  w.counters.bump(detail::CounterBlock::spins);
  const auto deadline = std::chrono::steady_clock::now() + budget;
  WorkItem* item = nullptr;
  for (std::uint32_t attempt = 0; item == nullptr; ++attempt) {
    if (stopping_.load(std::memory_order_relaxed)) break;
    if ((item = steal_work(w)) != nullptr) break;
    // Short, jittered pauses between probes keep us off the queues' cache lines without
    // adding much latency; the clock is read only every eighth probe.
    sync::Backoff::pause(attempt < 4 ? attempt : 4, w.rng.next());
    if (attempt % 8 == 7 && std::chrono::steady_clock::now() >= deadline) break;
  }
  w.spinner.record(item != nullptr);
  if (item != nullptr) w.counters.bump(detail::CounterBlock::spins_found_work);
  return item;
}

bool Scheduler::anything_queued() const noexcept {
  if (!global_.empty()) return true;
  const int n = started_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (slots_[static_cast<std::size_t>(i)]->queue.size_estimate() != 0) return true;
  return false;
}

bool Scheduler::poll_driver() noexcept {
  Worker* w = this_worker();
  if (w == nullptr || &w->owner != this) return false;
  return parking_->look(*w, /*inside_item=*/true);
}

void Scheduler::before_yield() noexcept {
  Worker* w = this_worker();
  if (w != nullptr && &w->owner == this) parking_->before_yield(*w);
}

bool Scheduler::attach_driver(Driver& driver) noexcept {
  return parking_->attach_driver(driver);
}

void Scheduler::detach_driver() noexcept {
  abort_if_on_worker("detach_driver");
  parking_->detach_driver();
}

bool Scheduler::attach_worker_drivers(WorkerDrivers& drivers) noexcept {
  return parking_->attach_worker_drivers(drivers);
}

void Scheduler::detach_worker_drivers() noexcept {
  abort_if_on_worker("detach_worker_drivers");
  parking_->detach_worker_drivers();
}

void Scheduler::run_worker(Worker& w) noexcept {
  this_worker() = &w;
  parking_->begin_pass(w);  // opens the worker's own driver, with per-worker parking
  w.passed_once.store(true, std::memory_order_release);  // enter_blocking() may wait for it
  w.passed_once.notify_all();
  while (!stopping_.load(std::memory_order_relaxed)) {
    parking_->begin_pass(w);  // an attach or detach since the last pass
    WorkItem* item = find_work(w);
    // Out of work: what the kernel has ready is the next work, before spinning for others'.
    if (item == nullptr && parking_->look(w, /*inside_item=*/false)) item = find_work(w);
    if (item == nullptr) item = spin_for_work(w);
    if (item == nullptr) {
      parking_->park(w);
      continue;
    }
    if (w.searching) transition_from_searching(w);
    w.counters.bump(detail::CounterBlock::run);
    w.running = item;
    w.first_woken = false;
    item->fn(item, Disposition::run);
    if (w.timing_tail) {
      // Remember how long this item ran on after queueing work (the item may be gone by now;
      // only its address is kept, never dereferenced); as long as can be if another worker
      // took its work meanwhile, since then it may not have returned by itself (submit()).
      w.timing_tail = false;
      const std::uint64_t tail = detail::cycle_ticks() - w.queued_at;
      const std::uint64_t cap = 4 * short_local_ticks_;
      const bool helped = items_taken(w.queue, global_, w.tail_local) != w.tail_taken;
      w.tails.record(item, helped ? cap : tail, cap);
    }
    if (w.notify_deferred) {
      // Wake only for a surplus: this worker runs one queued item itself next.
      w.notify_deferred = false;
      if (w.queue.size_estimate() + global_.size() > 1) notify_parked();
    }
    // A busy worker looks into the driver now and then, so completions do not wait for a
    // worker to run out of work.
    if (++w.since_poll >= kPollInterval) parking_->look(w, /*inside_item=*/false);
  }
  parking_->end_loop(w);
  this_worker() = nullptr;
}

void Scheduler::enter_blocking() noexcept {
  Worker* w = this_worker();
  blocked_.fetch_add(1, std::memory_order_seq_cst);
  const bool ours = w != nullptr && &w->owner == this;
  if (ours) {
    ++w->blocking;
    // Our local items would wait for the blocking call to return: give them to everyone.
    WorkItem* first = nullptr;
    WorkItem* last = nullptr;
    std::size_t count = 0;
    while (WorkItem* item = w->queue.pop()) {
      item->next = first;
      first = item;
      if (last == nullptr) last = item;
      ++count;
    }
    if (first != nullptr) global_.push_batch(first, last, count);
    parking_->blocking_entered(*w);
  }
  Worker* spare = notify_parked() ? nullptr : start_spare_if_needed();
  if (ours) parking_->blocking_covered(*w, spare);
}

void Scheduler::leave_blocking() noexcept {
  Worker* w = this_worker();
  if (w != nullptr && &w->owner == this) {
    --w->blocking;
    parking_->blocking_left(*w);
  }
  blocked_.fetch_sub(1, std::memory_order_seq_cst);
}

Scheduler::Worker* Scheduler::start_spare_if_needed() noexcept {
  if (stopping_.load(std::memory_order_acquire)) return nullptr;  // cheap: no lock once stopping
  std::lock_guard lock(lifecycle_mutex_);
  if (stopping_.load(std::memory_order_relaxed)) return nullptr;  // set under this lock: exact
  const int index = started_.load(std::memory_order_relaxed);
  if (index >= max_workers_) return nullptr;
  const std::uint32_t s = idle_state_.load(std::memory_order_relaxed);
  if (static_cast<int>(unparked_of(s)) - blocked_.load(std::memory_order_relaxed) >= workers_)
    return nullptr;  // enough workers are awake after all
  Worker& w = *slots_[static_cast<std::size_t>(index)];
  // Counted as unparked + searching before it runs, exactly like a woken worker.
  w.searching = true;
  idle_state_.fetch_add(kSearchingOne + kUnparkedOne, std::memory_order_seq_cst);
  // Counted as started before its thread exists, as the first workers are (the constructor):
  // S3 counts sleepers as started_ - unparked, and the spare may park at once. Stored after
  // its thread started, a submit in between saw the parked spare as nobody asleep and woke no
  // one, and its item waited for the regions' end
  // (BlockingRegion.ASpareThatParksBeforeItsStartIsPublishedIsWokenForWork). Release: the
  // slot is published to thieves, who read started_ with acquire; its empty queue is all they
  // see until the thread runs.
  started_.store(index + 1, std::memory_order_release);
  try {
    start_worker(static_cast<std::size_t>(index));
  } catch (...) {
    // No thread to be had: undo. While it was counted, a parker (P3) or a submitter (S3) may
    // have left the work to this would-be searcher; look again for a sleeper to take it.
    started_.store(index, std::memory_order_release);
    w.searching = false;
    idle_state_.fetch_sub(kSearchingOne + kUnparkedOne, std::memory_order_seq_cst);
    notify_parked();
    return nullptr;
  }
  spare_workers_started_.fetch_add(1, std::memory_order_relaxed);
  if (auto* hook = detail::spare_started_hook.load(std::memory_order_relaxed)) hook();
  return &w;
}

std::uint64_t Scheduler::stop() noexcept {
  abort_if_on_worker("stop");  // a worker cannot join itself
  std::lock_guard stop_lock(stop_mutex_);
  if (stopped_) return 0;
  {
    // Under lifecycle_mutex_ so that no spare starts after we read started_ below; released
    // before joining, since a worker entering a blocking region may be waiting for it.
    std::lock_guard lock(lifecycle_mutex_);
    stopping_.store(true, std::memory_order_seq_cst);
  }
  // Let submits that passed the stopping_ check finish queueing, so nothing lands after the
  // drain below. They are a few instructions long.
  while (submitters_.load(std::memory_order_acquire) != 0)
    std::this_thread::yield();
  const int started = started_.load(std::memory_order_acquire);
  parking_->wake_all_for_stop(started);
  for (int i = 0; i < started; ++i) {
    auto& t = slots_[static_cast<std::size_t>(i)]->thread;
    if (t.joinable()) t.join();
  }
  // Workers are gone: whatever is still queued will never run.
  auto drop = [](WorkItem* item) { item->fn(item, Disposition::drop); };
  for (int i = 0; i < started; ++i)
    while (WorkItem* item = slots_[static_cast<std::size_t>(i)]->queue.pop())
      drop(item);
  for (WorkItem* item = global_.take_all(); item != nullptr;) {
    WorkItem* next = item->next;
    drop(item);
    item = next;
  }
  SchedulerCounters c = counters();
  const std::uint64_t dropped = c.queued();
  external_counters_.add(detail::CounterBlock::dropped, dropped);
  stopped_ = true;
  return dropped;
}

SchedulerCounters Scheduler::counters() const noexcept {
  SchedulerCounters c;
  external_counters_.add_to(c);
  const int n = started_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    slots_[static_cast<std::size_t>(i)]->counters.add_to(c);
  c.spare_workers = spare_workers_started_.load(std::memory_order_relaxed);
  return c;
}

bool Scheduler::idle() const noexcept {
  return unparked_of(idle_state_.load(std::memory_order_acquire)) == 0 && !anything_queued();
}

bool Scheduler::nudge_sleepers() noexcept {
  return parking_->nudge_sleepers();
}

bool Scheduler::sleepers_nudged() noexcept {
  return parking_->sleepers_nudged();
}

int Scheduler::parked_workers() const noexcept {
  const int unparked = static_cast<int>(unparked_of(idle_state_.load(std::memory_order_relaxed)));
  const int parked = started_.load(std::memory_order_acquire) - unparked;
  return parked > 0 ? parked : 0;
}

}  // namespace arbor::sched
