// Blocking regions and the paused clock, as a user sees them, on every engine and io mode.
//
// A BlockingRegion promises that the rest of the runtime keeps going while one worker blocks:
// its queued work, the timers and the IO of its sockets. The io mode where that is hardest is
// io_uring's default, a ring per worker: a worker's ring has one issuer, so only the worker can
// reap it, and a blocked worker must hand what it watches to another ring (lend), which must
// exist. These tests block every configured worker, or overlap regions on two of them, and
// check that a timer fires and reads complete meanwhile (each failed on rings before the fix:
// the timer waited for the region's end, the reads for the second region's end). The last one
// checks the paused clock's promise: it jumps only when nothing is ready anywhere in the engine,
// so a receive whose bytes have arrived completes before a sleeper's hour passes.
#include "arbor/sched/blocking_region.hpp"

#include <gtest/gtest.h>

#if defined(__linux__)
#include <sys/resource.h>
#include <unistd.h>
#endif

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include "../sched/test_support.hpp"
#include "arbor/arbor.hpp"
#include "arbor/internal/log.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;
using sched::test::Countdown;

std::unique_ptr<Runtime> make_runtime(const std::string& engine, int workers,
                                      std::optional<int> spares = std::nullopt) {
  RuntimeOptions o;
  o.engine = test::engine_options(engine);
  o.scheduler = test::scheduler_options(engine);
  o.scheduler.workers = workers;
  o.scheduler.max_spare_workers = spares;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt) << rt.error().message();
  return rt ? std::move(*rt) : nullptr;
}

struct Pair {
  TcpStream client;
  TcpStream server;
};

// `n` connected pairs on loopback; empty if anything failed.
Task<std::vector<Pair>> connect_pairs(Runtime& rt, int n) {
  std::vector<Pair> pairs;
  auto listener = TcpListener::bind(rt, Address::loopback_v4(0));
  if (!listener) co_return pairs;
  for (int i = 0; i < n; ++i) {
    auto accepted = rt.spawn(listener->accept());
    auto client = co_await TcpStream::connect(rt, *listener->local_address());
    auto server = co_await std::move(accepted);
    if (!client || !server) co_return std::vector<Pair>{};
    pairs.push_back({std::move(*client), std::move(*server)});
  }
  co_return pairs;
}

// Blocks its worker in a region until `release` reaches zero (or 10 s pass); counts `in`
// down once inside. True if it was released, not timed out.
Task<bool> block_until(Countdown& in, Countdown& release) {
  sched::BlockingRegion region;
  in.count_down();
  co_return release.wait(10s);
}

// Writes one byte on each pair's client.
Task<bool> write_byte_each(std::vector<Pair>& pairs) {
  for (auto& p : pairs)
    if (!co_await p.client.write_all(std::as_bytes(std::span("x", 1)))) co_return false;
  co_return true;
}

Task<bool> read_one(TcpStream& s, Countdown& done) {
  std::byte b[1];
  auto n = co_await s.read_some(b);
  done.count_down();
  co_return n&&* n == 1;
}

// Once `blocked` reached zero, sleeps 20 ms, then counts `slept` down.
Task<> sleep_after(Countdown& blocked, Countdown& slept) {
  while (blocked.left() != 0)
    co_await yield();
  co_await sleep_for(20ms);
  slept.count_down();
}

class BlockingRegionTest : public ::testing::TestWithParam<std::string> {};

// The only worker blocks in a region until a task's 20 ms sleep ends. That task runs on the
// spare the region starts, and its timer must fire while the region lasts (on rings the spare
// had no ring and parked on a futex with no deadline: nobody watched the timers).
TEST_P(BlockingRegionTest, ATimerFiresWhileTheOnlyWorkerBlocksInARegion) {
  auto rt = make_runtime(GetParam(), 1);
  ASSERT_TRUE(rt);
  Countdown in(1), slept(1);
  auto sleeper = rt->spawn(sleep_after(in, slept));
  EXPECT_TRUE(rt->block_on(block_until(in, slept))) << "the timer waited for the region's end";
  sleeper.join_blocking();
}

// Both workers block in regions until a 20 ms sleep ends (run by a spare).
TEST_P(BlockingRegionTest, ATimerFiresWhileEveryWorkerBlocksInARegion) {
  auto rt = make_runtime(GetParam(), 2);
  ASSERT_TRUE(rt);
  Countdown in(2), slept(1);
  auto a = rt->spawn(block_until(in, slept));
  auto b = rt->spawn(block_until(in, slept));
  auto sleeper = rt->spawn(sleep_after(in, slept));
  EXPECT_TRUE(a.join_blocking()) << "the timer waited for the regions' end";
  EXPECT_TRUE(b.join_blocking());
  sleeper.join_blocking();
}

// Worker A blocks (its sockets move to B's ring), then B blocks too, then A's region ends: the
// sockets, old and new, must be served while B is still blocked (on rings, B's lend found no
// other open ring and kept every socket, and place() went on putting new ones there).
TEST_P(BlockingRegionTest, OverlappingRegionsLeaveNoSocketOnABlockedWorker) {
  auto rt = make_runtime(GetParam(), 2);
  ASSERT_TRUE(rt);
  constexpr int kPairs = 4;
  auto old_pairs = rt->block_on(connect_pairs(*rt, kPairs));
  ASSERT_EQ(old_pairs.size(), std::size_t{kPairs});
  Countdown a_in(1), a_release(1), b_in(1), reads(2 * kPairs);
  auto a = rt->spawn(block_until(a_in, a_release));
  ASSERT_TRUE(a_in.wait(10s));
  auto b = rt->spawn(block_until(b_in, reads));  // released by the reads, or 10 s
  ASSERT_TRUE(b_in.wait(10s));
  a_release.count_down();
  EXPECT_TRUE(a.join_blocking());
  // B still blocks (until every read below completed): new sockets now, then a read on each.
  auto new_pairs = rt->block_on(connect_pairs(*rt, kPairs));
  ASSERT_EQ(new_pairs.size(), std::size_t{kPairs});
  std::vector<JoinHandle<bool>> readers;
  for (auto* pairs : {&old_pairs, &new_pairs})
    for (auto& p : *pairs)
      readers.push_back(rt->spawn(read_one(p.server, reads)));
  EXPECT_TRUE(rt->block_on(write_byte_each(old_pairs)));
  EXPECT_TRUE(rt->block_on(write_byte_each(new_pairs)));
  EXPECT_TRUE(b.join_blocking()) << "reads waited for the second region's end";
  for (auto& h : readers)
    EXPECT_TRUE(h.join_blocking());
}

// The bound when no worker can take over (no spare allowed, both workers blocked in turn): what
// the second region's worker watched waits for its end, but a socket attached after the first
// region ended is not put on the blocked worker's ring: its read completes meanwhile.
TEST_P(BlockingRegionTest, WithNoSpareNewSocketsAvoidABlockedWorker) {
  auto rt = make_runtime(GetParam(), 2, /*spares=*/0);
  ASSERT_TRUE(rt);
  constexpr int kPairs = 4;
  Countdown a_in(1), a_release(1), b_in(1), reads(kPairs);
  auto a = rt->spawn(block_until(a_in, a_release));
  ASSERT_TRUE(a_in.wait(10s));
  auto b = rt->spawn(block_until(b_in, reads));
  ASSERT_TRUE(b_in.wait(10s));
  a_release.count_down();
  EXPECT_TRUE(a.join_blocking());
  auto pairs = rt->block_on(connect_pairs(*rt, kPairs));
  ASSERT_EQ(pairs.size(), std::size_t{kPairs});
  std::vector<JoinHandle<bool>> readers;
  for (auto& p : pairs)
    readers.push_back(rt->spawn(read_one(p.server, reads)));
  EXPECT_TRUE(rt->block_on(write_byte_each(pairs)));
  EXPECT_TRUE(b.join_blocking()) << "new sockets' reads waited for the region's end";
  for (auto& h : readers)
    EXPECT_TRUE(h.join_blocking());
}

// Paused clock: a reader waits on one socket, a sleeper for an hour; bytes are written to the
// reader. The clock may jump to the sleeper's deadline only once nothing is ready: the read's
// completion must see the time of the write, not an hour later (on rings the watcher looked
// only at its own ring and the scheduler, and jumped while the completion sat in another ring).
TEST_P(BlockingRegionTest, APausedClockDoesNotJumpPastAPendingCompletion) {
  TestClock clock;
  // More workers than cores: a woken ring's owner may wait for a core while another ring's
  // watcher, running, finds every worker parked.
  auto rt = make_runtime(GetParam(), 4);
  ASSERT_TRUE(rt);
  auto body = [](Runtime& r) -> Task<std::string> {
    auto pairs = co_await connect_pairs(r, 4);
    if (pairs.size() != 4) co_return "connect";
    int late = 0;
    constexpr int kRounds = 200;
    for (int round = 0; round < kRounds; ++round) {
      Pair& p = pairs[static_cast<std::size_t>(round) % pairs.size()];
      const auto start = Clock::now();
      Countdown reading(1);
      auto reader = r.spawn([](TcpStream& s, Countdown& started) -> Task<Clock::time_point> {
        std::byte b[1];
        started.count_down();
        auto n = co_await s.read_some(b);
        co_return n&&* n == 1 ? Clock::now() : Clock::time_point::max();
      }(p.server, reading));
      auto sleeper = r.spawn([]() -> Task<> { co_await sleep_for(1h); }());
      while (reading.left() != 0)
        co_await yield();
      if (!co_await p.client.write_all(std::as_bytes(std::span("x", 1)))) co_return "write";
      const auto read_at = co_await std::move(reader);
      if (read_at == Clock::time_point::max()) co_return "read";
      if (read_at != start) ++late;
      co_await std::move(sleeper);
      if (Clock::now() - start < 1h) co_return "the sleeper woke early";
    }
    co_return late == 0 ? "ok"
                        : std::to_string(late) + " of " + std::to_string(kRounds) +
                              " reads completed after the clock jumped";
  };
  EXPECT_EQ(rt->block_on(body(*rt)), "ok");
}

#if defined(__linux__)
// While alive, no new descriptor can be made (RLIMIT_NOFILE lowered to the lowest free number,
// the holes below it filled); the destructor gives everything back.
class NoDescriptorsLeft {
 public:
  NoDescriptorsLeft() {
    ok_ = ::getrlimit(RLIMIT_NOFILE, &saved_) == 0;
    if (!ok_) return;
    int highest = -1;
    for (int fd = ::dup(0); fd >= 0; fd = ::dup(0)) {  // fills every hole up to the limit...
      filler_.push_back(fd);
      highest = std::max(highest, fd);
      if (filler_.size() > 64) break;  // ...or the first 64 free numbers
    }
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(highest + 1);
    ok_ = highest >= 0 && ::setrlimit(RLIMIT_NOFILE, &low) == 0;
    // Everything below the limit is taken now: the next descriptor fails with EMFILE.
    const int probe = ::dup(0);
    if (probe >= 0) {
      ::close(probe);
      ok_ = false;
    }
  }
  ~NoDescriptorsLeft() {
    for (int fd : filler_)
      ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  std::vector<int> filler_;
  bool ok_ = false;
};

// A region entered while no descriptor can be made (a transient EMFILE, as a busy server meets)
// starts a spare whose ring cannot be set up. Once descriptors are free again, a later region
// must keep the timers' promise as any region does: the spare is still the only other worker
// (spares never exit), so it must watch them. On rings the failed spare's ring was retired for
// good and the spare parks on a futex with no deadline: the timer waits for the region's end.
TEST_P(BlockingRegionTest, ASpareWhoseRingFailedOnceWatchesTimersOnceDescriptorsAreBack) {
  auto rt = make_runtime(GetParam(), 1, /*spares=*/1);
  ASSERT_TRUE(rt);
  // The spare logs why its ring failed. Under UBSan the first call through each polymorphic
  // type on that path (the logger, its sinks, fmt's buffer, the error category) checks its
  // vptr, and that check needs a descriptor of the sanitizer's own (it probes the memory through
  // a pipe): with none left it reports a false "invalid vptr". So one line goes the same way
  // while descriptors remain (at startup arbor logs nothing by default that would do it).
  log::warn("descriptors run out next ({} is what the spare will meet)",
            std::error_code(EMFILE, std::system_category()).message());
  // The same for the worker's first look into its driver (a virtual call), which it makes when
  // it first runs out of work: a sleep makes it run out before the descriptors do.
  rt->block_on([]() -> Task<> { co_await sleep_for(1ms); }());
  {
    NoDescriptorsLeft exhausted;
    ASSERT_TRUE(exhausted.ok());
    Countdown in(1), release(0);
    EXPECT_TRUE(rt->block_on(block_until(in, release)));  // starts the spare, released at once
  }
  ASSERT_EQ(rt->scheduler().counters().spare_workers, 1u);
  Countdown in(1), slept(1);
  auto sleeper = rt->spawn(sleep_after(in, slept));
  EXPECT_TRUE(rt->block_on(block_until(in, slept))) << "the timer waited for the region's end";
  sleeper.join_blocking();
}

// Spares are started only for blocking regions, and a spare's ring is set up only when one
// starts: a scheduler allowed many spares (Tokio allows 512 blocking threads by default) must
// not pay descriptors for them up front. Here 64 descriptors are left and 256 spares allowed;
// the runtime must come up and run a task. On rings every allowed spare's ring got an eventfd at
// Engine::create(): 257 of them, EMFILE, and create() failed (before spares had rings it made 1).
TEST_P(BlockingRegionTest, ManyAllowedSparesCostNoDescriptorsUntilTheyStart) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free + 64);
  ASSERT_LE(low.rlim_cur, saved.rlim_cur);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::unique_ptr<Runtime> rt;
  {
    RuntimeOptions o;
    o.engine = test::engine_options(GetParam());
    o.scheduler = test::scheduler_options(GetParam());
    o.scheduler.workers = 1;
    o.scheduler.max_spare_workers = 256;
    auto created = Runtime::create(o);
    EXPECT_TRUE(created) << created.error().message();
    if (created) rt = std::move(*created);
  }
  if (rt) {
    EXPECT_EQ(rt->block_on([]() -> Task<int> { co_return 7; }()), 7);
  }
  rt.reset();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
}
#endif

INSTANTIATE_TEST_SUITE_P(Engines, BlockingRegionTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
