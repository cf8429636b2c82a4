// perf/channel: how fast tasks hand messages to each other, and what an uncontended async lock
// costs.
//
//   channel [--messages N] [--producers P] [--capacity C] [--workers W] [--repeat R]
//
// Each case moves N 8-byte messages (default 2*10^6) from 1 and from P producers (default 4)
// to one consumer and prints the median of R runs (default 5) as messages/s and ns/message:
//   arbor mpsc bounded    producer tasks co_await send() on a C-slot channel (default 1024),
//                         a consumer task co_awaits recv(); W workers (default 2)
//   arbor mpsc unbounded  the same with send() that never waits
//   scheduler submit      producer tasks submit one preallocated sched::WorkItem per message
//                         to the runtime's scheduler; the item is the message (its run is the
//                         consumer): the floor a channel on this scheduler could reach
//   mutex+condvar queue   producer threads and a consumer thread on a std::deque guarded by a
//                         std::mutex, with condition variables (bounded: C slots)
// Then arbor::Mutex: co_await lock() and unlock on a free mutex (and try_lock), in a loop in
// one task, beside std::mutex lock/unlock in a loop on a thread.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "arbor/arbor.hpp"
#include "arbor/sync/thread_blocker.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using arbor::JoinHandle;
using arbor::Runtime;
using arbor::Task;

struct Config {
  std::uint64_t messages = 2'000'000;
  int producers = 4;
  std::size_t capacity = 1024;
  int workers = 2;
  int repeat = 5;
};

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (v <= 0) {
      std::fprintf(stderr, "%s: %s wants a positive number\n", argv[0], argv[i]);
      std::exit(2);
    }
    if (a == "--messages") {
      c.messages = static_cast<std::uint64_t>(v);
    } else if (a == "--producers") {
      c.producers = static_cast<int>(v);
    } else if (a == "--capacity") {
      c.capacity = static_cast<std::size_t>(v);
    } else if (a == "--workers") {
      c.workers = static_cast<int>(v);
    } else if (a == "--repeat") {
      c.repeat = static_cast<int>(v);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--messages N] [--producers P] [--capacity C] [--workers W] "
                   "[--repeat R]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return c;
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

template <class Run>
void report(const char* name, int producers, std::uint64_t messages, int repeat, Run run) {
  std::vector<double> s;
  for (int i = 0; i < repeat; ++i)
    s.push_back(seconds(run()));
  std::sort(s.begin(), s.end());
  const double median = s[s.size() / 2];
  std::printf("%-24s | %d producer%s | %6.2f M msg/s | %7.1f ns/msg | best %6.1f ns/msg\n", name,
              producers, producers == 1 ? " " : "s", static_cast<double>(messages) / median / 1e6,
              median * 1e9 / static_cast<double>(messages),
              s.front() * 1e9 / static_cast<double>(messages));
}

// ------------------------------------------------------------------------------ mpsc

template <class Sender>
Task<void> produce(Sender tx, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    if constexpr (requires { tx.capacity(); }) {
      (void)co_await tx.send(i);
    } else {
      (void)tx.send(i);
    }
  }
}

template <class Receiver>
Task<std::uint64_t> consume(Receiver& rx) {
  std::uint64_t count = 0;
  while (auto m = co_await rx.recv())
    ++count;
  co_return count;
}

template <class Make>
Clock::duration run_mpsc(Runtime& rt, int producers, std::uint64_t messages, Make make) {
  auto [tx, rx] = make();
  const auto start = Clock::now();
  auto consumer = rt.spawn(consume(rx));
  for (int p = 0; p < producers; ++p)
    rt.spawn(produce(tx, messages / producers)).detach();
  { auto gone = std::move(tx); }
  const std::uint64_t got = consumer.join_blocking();
  const auto took = Clock::now() - start;
  if (got != messages / producers * producers) std::abort();
  return took;
}

// -------------------------------------------------------------------- scheduler submit

struct Item : arbor::sched::WorkItem {
  Item() : WorkItem(&run) {}
  static void run(arbor::sched::WorkItem* self, arbor::sched::Disposition) noexcept {
    auto& shared = *static_cast<Item*>(self)->left;
    if (shared.left.fetch_sub(1, std::memory_order_acq_rel) == 1) shared.done.wake();
  }
  struct Shared {
    std::atomic<std::uint64_t> left;
    arbor::sync::ThreadBlocker done;
  }* left = nullptr;
};

Task<void> submit_items(Runtime& rt, Item* items, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i)
    rt.scheduler().submit(items[i], /*prefer_local=*/true);
  co_return;
}

Clock::duration run_submit(Runtime& rt, int producers, std::uint64_t messages) {
  const std::uint64_t per = messages / producers;
  auto items = std::make_unique<Item[]>(per * producers);
  Item::Shared shared{{per * producers}, {}};
  for (std::uint64_t i = 0; i < per * producers; ++i)
    items[i].left = &shared;
  const auto start = Clock::now();
  for (int p = 0; p < producers; ++p)
    rt.spawn(submit_items(rt, items.get() + p * per, per)).detach();
  shared.done.wait();
  return Clock::now() - start;
}

// --------------------------------------------------------------- mutex + condition_variable

struct CvQueue {
  std::mutex mutex;
  std::condition_variable not_empty, not_full;
  std::deque<std::uint64_t> queue;
  std::size_t capacity;  // 0: unbounded
  int producers_left;
};

Clock::duration run_cv(int producers, std::uint64_t messages, std::size_t capacity) {
  CvQueue q;
  q.capacity = capacity;
  q.producers_left = producers;
  const std::uint64_t per = messages / producers;
  const auto start = Clock::now();
  std::thread consumer([&q] {
    std::unique_lock lock(q.mutex);
    for (;;) {
      q.not_empty.wait(lock, [&] { return !q.queue.empty() || q.producers_left == 0; });
      if (q.queue.empty()) return;
      q.queue.pop_front();
      if (q.capacity != 0) q.not_full.notify_one();
    }
  });
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&q, per] {
      for (std::uint64_t i = 0; i < per; ++i) {
        std::unique_lock lock(q.mutex);
        if (q.capacity != 0) q.not_full.wait(lock, [&] { return q.queue.size() < q.capacity; });
        q.queue.push_back(i);
        lock.unlock();
        q.not_empty.notify_one();
      }
      std::lock_guard lock(q.mutex);
      if (--q.producers_left == 0) q.not_empty.notify_all();
    });
  for (auto& t : threads)
    t.join();
  consumer.join();
  return Clock::now() - start;
}

// ----------------------------------------------------------------------------- Mutex

Task<double> arbor_mutex_ns(std::uint64_t n) {
  arbor::Mutex m;
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    auto guard = co_await m.lock();
    if (!guard) std::abort();
  }
  co_return seconds(Clock::now() - start) * 1e9 / static_cast<double>(n);
}

Task<double> arbor_try_lock_ns(std::uint64_t n) {
  arbor::Mutex m;
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    auto guard = m.try_lock();
    if (!guard) std::abort();
  }
  co_return seconds(Clock::now() - start) * 1e9 / static_cast<double>(n);
}

double std_mutex_ns(std::uint64_t n) {
  std::mutex m;
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < n; ++i) {
    m.lock();
    m.unlock();
  }
  return seconds(Clock::now() - start) * 1e9 / static_cast<double>(n);
}

template <class F>
double median_of(int repeat, F f) {
  std::vector<double> v;
  for (int i = 0; i < repeat; ++i)
    v.push_back(f());
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Config c = parse(argc, argv);
  arbor::RuntimeOptions options;
  options.scheduler.workers = c.workers;
  Runtime rt(options);
  std::printf("%llu messages, capacity %zu, %d workers, median of %d runs\n",
              static_cast<unsigned long long>(c.messages), c.capacity, c.workers, c.repeat);

  for (int producers : {1, c.producers}) {
    const std::uint64_t n = c.messages;
    report("arbor mpsc bounded", producers, n, c.repeat, [&] {
      return run_mpsc(rt, producers, n,
                      [&] { return arbor::mpsc::channel<std::uint64_t>(c.capacity); });
    });
    report("arbor mpsc unbounded", producers, n, c.repeat, [&] {
      return run_mpsc(rt, producers, n,
                      [] { return arbor::mpsc::unbounded_channel<std::uint64_t>(); });
    });
    report("arbor scheduler submit", producers, n, c.repeat,
           [&] { return run_submit(rt, producers, n); });
    report("mutex+condvar bounded", producers, n, c.repeat,
           [&] { return run_cv(producers, n, c.capacity); });
    report("mutex+condvar unbounded", producers, n, c.repeat,
           [&] { return run_cv(producers, n, 0); });
  }

  const std::uint64_t locks = 20'000'000;
  const double lock_ns = median_of(c.repeat, [&] { return rt.block_on(arbor_mutex_ns(locks)); });
  const double try_ns = median_of(c.repeat, [&] { return rt.block_on(arbor_try_lock_ns(locks)); });
  const double std_ns = median_of(c.repeat, [&] { return std_mutex_ns(locks); });
  std::printf("arbor::Mutex uncontended co_await lock() + unlock | %5.1f ns\n", lock_ns);
  std::printf("arbor::Mutex uncontended try_lock() + unlock      | %5.1f ns\n", try_ns);
  std::printf("std::mutex uncontended lock() + unlock            | %5.1f ns\n", std_ns);
  return 0;
}
