// arbor::asio::Stream allocates nothing per operation in steady state (stream.hpp: "its
// handler moves into the core's reusable slot"): a task awaiting async_write_some and
// async_read_some with use_task, echoed by an arbor peer, on every engine with one worker.
// A binary of its own: it replaces the global operator new. Only the worker's allocations
// are counted (the tasks mark the thread they run on), as in buffered_alloc_test.cpp.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <new>

#include "arbor/asio/asio.hpp"
#include "runtime/runtime_support.hpp"

#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<unsigned long long> g_marked{0};
thread_local bool t_marked = false;
}  // namespace

void* operator new(std::size_t size) {
  if (t_marked) g_marked.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace {

namespace net = boost::asio;
using arbor::asio::use_task;

constexpr int kWarmUp = 500;
constexpr int kMeasured = 5000;

arbor::Task<arbor::Result<void>> echo(arbor::TcpStream& peer, int rounds) {
  std::array<std::byte, 16> b{};
  for (int i = 0; i < rounds; ++i) {
    t_marked = true;
    auto n = co_await peer.read_some(b);
    if (!n || *n == 0) co_return std::make_error_code(std::errc::connection_aborted);
    auto w = co_await peer.write_all(std::span(b.data(), *n));
    if (!w) co_return w.error();
  }
  co_return arbor::Result<void>{};
}

// One round: a byte out, the byte back. -1 if one failed.
arbor::Task<long long> ping_pong(arbor::asio::Stream& s) {
  std::array<char, 16> out{'x'}, in{};
  unsigned long long before = 0;
  for (int i = 0; i < kWarmUp + kMeasured; ++i) {
    t_marked = true;
    if (i == kWarmUp) before = g_marked.load();
    auto w = co_await s.async_write_some(net::buffer(out.data(), 1), use_task);
    if (!w) co_return -1;
    auto r = co_await s.async_read_some(net::buffer(in), use_task);
    if (!r || *r != 1) co_return -1;
  }
  co_return static_cast<long long>(g_marked.load() - before);
}

class AsioStreamAllocations : public ::testing::TestWithParam<std::string> {};

TEST_P(AsioStreamAllocations, NonePerReadOrWriteInSteadyState) {
  auto rt = arbor::test::make_runtime(GetParam(), 1);
  ASSERT_NE(rt, nullptr);
  {
    arbor::asio::Context ctx(*rt);
    auto pair = rt->block_on(arbor::test::connected_pair(*rt));
    ASSERT_TRUE(pair) << pair.error().message();
    arbor::asio::Stream stream(ctx, std::move(pair->server));
    auto peer = rt->spawn(echo(pair->client, kWarmUp + kMeasured));
    const long long allocations = rt->block_on(ping_pong(stream));
    auto echoed = peer.join_blocking();
    EXPECT_TRUE(echoed) << echoed.error().message();
    EXPECT_EQ(allocations, 0) << "over " << kMeasured << " round trips";
    stream.close();
    ctx.wait_idle();
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, AsioStreamAllocations,
                         ::testing::ValuesIn(arbor::test::engine_variants()),
                         arbor::test::engine_name);

}  // namespace
