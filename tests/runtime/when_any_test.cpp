// when_any: the first to finish wins, the others are cancelled and finished before it returns.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "arbor/arbor.hpp"
#include "gate.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;
using test::Gate;

constexpr auto kCanceled = std::errc::operation_canceled;

// Waits on `gate`; records that it has ended (and how) before it returns.
Task<Result<void>> loser(Gate& gate, std::atomic<int>& cancelled) {
  auto r = co_await gate.wait();
  if (!r && r.error() == kCanceled) cancelled.fetch_add(1);
  co_return r;
}
Task<std::string> text(std::string s) {
  co_return s;
}

TEST(WhenAny, FirstToFinishWinsAndTheOthersAreCancelledBeforeItReturns) {
  auto rt = test::make_runtime("auto");
  Gate never;
  std::atomic<int> cancelled{0};
  auto r = rt->block_on(
      [](Gate& g, std::atomic<int>& c) -> Task<std::variant<Result<void>, std::string>> {
        co_return co_await when_any(loser(g, c), text("won"));
      }(never, cancelled));
  ASSERT_EQ(r.index(), 1u);
  EXPECT_EQ(std::get<1>(r), "won");
  EXPECT_EQ(cancelled.load(), 1);  // finished before when_any returned: no task outlived it
}

TEST(WhenAny, VectorFormGivesIndexAndValue) {
  auto rt = test::make_runtime("auto");
  Gate gates[3];
  auto r = rt->block_on([](Gate* g) -> Task<std::pair<std::size_t, int>> {
    std::vector<Task<int>> tasks;
    for (int i = 0; i < 3; ++i)
      tasks.push_back([](Gate& gate, int v) -> Task<int> {
        co_return (co_await gate.wait()) ? v : -1;
      }(g[i], i * 10));
    g[2].open();  // the tasks have not started: only gate 2 can ever let one finish first
    co_return co_await when_any(std::move(tasks));
  }(gates));
  EXPECT_EQ(r.first, 2u);
  EXPECT_EQ(r.second, 20);
}

TEST(WhenAny, AcceptsAnyAwaitable) {
  auto rt = test::make_runtime("auto");
  Gate gate;
  gate.open();
  auto r = rt->block_on([](Gate& g) -> Task<std::size_t> {
    auto v = co_await when_any(sleep_for(1h), g.wait());
    co_return v.index();
  }(gate));
  EXPECT_EQ(r, 1u);
}

TEST(WhenAny, AWinnerThatThrowsIsRethrownAfterTheOthersFinished) {
  auto rt = test::make_runtime("auto");
  Gate never;
  std::atomic<int> cancelled{0};
  auto thrower = []() -> Task<int> {
    throw std::runtime_error("first");
    co_return 0;
  };
  EXPECT_THROW(rt->block_on([](Gate& g, std::atomic<int>& c, auto t) -> Task<> {
    co_await when_any(loser(g, c), t());
  }(never, cancelled, thrower)),
               std::runtime_error);
  EXPECT_EQ(cancelled.load(), 1);
}

// Cancelling the caller cancels every contestant; the first of them to finish still wins.
TEST(WhenAny, CancellingTheCallerCancelsAll) {
  auto rt = test::make_runtime("auto");
  Gate a, b;
  std::atomic<int> cancelled{0};
  auto h = rt->spawn_abortable([](Gate& ga, Gate& gb, std::atomic<int>& c) -> Task<bool> {
    auto r = co_await when_any(loser(ga, c), loser(gb, c));
    co_return std::visit([](auto& v) { return v.error() == kCanceled; }, r);
  }(a, b, cancelled));
  h.abort();
  EXPECT_TRUE(h.join_blocking());
  EXPECT_EQ(cancelled.load(), 2);
}

TEST(WhenAny, EmptyVectorIsAnError) {
  auto rt = test::make_runtime("auto");
  EXPECT_THROW(rt->block_on([]() -> Task<> { co_await when_any(std::vector<Task<int>>{}); }()),
               std::invalid_argument);
}

// Many races on two workers, contestants that yield and finish: one winner each (TSan).
TEST(WhenAny, ManyRacesAcrossWorkers) {
  auto rt = test::make_runtime("auto", 2);
  auto r = rt->block_on([]() -> Task<int> {
    int valid = 0;
    for (int round = 0; round < 500; ++round) {
      std::vector<Task<int>> tasks;
      for (int i = 0; i < 4; ++i)
        tasks.push_back([](int v) -> Task<int> {
          co_await yield();
          co_return v;
        }(i));
      auto [index, value] = co_await when_any(std::move(tasks));
      valid += index < 4 && static_cast<int>(index) == value;
    }
    co_return valid;
  }());
  EXPECT_EQ(r, 500);
}

}  // namespace
}  // namespace arbor
