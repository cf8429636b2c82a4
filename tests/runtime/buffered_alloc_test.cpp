// The buffered reader allocates nothing per line in steady state: operator new is counted (a
// binary of its own, since it replaces the global operator new), and reading thousands of
// lines after a warm-up adds none. Over a scripted stream (the reader's own code alone, every
// allocation in the process counted), and over TCP on every engine with one worker, where
// coroutine frames come from the frame pool. There the count is of the threads that run the
// reading and writing tasks (each marks its thread as it runs): a poller thread (the
// "-pollers" variants) also allocates now and then while the scheduler's event pool grows to
// its working size, on its own schedule, which is the scheduler's business and not per line.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "arbor/arbor.hpp"
#include "runtime_support.hpp"
#include "scripted_stream.hpp"

// The replacements below are a matched pair (malloc/free); GCC warns once they are inlined.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<unsigned long long> g_allocations{0};         // every thread
std::atomic<unsigned long long> g_marked_allocations{0};  // threads that ran a marked task
thread_local bool t_marked = false;
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (t_marked) g_marked_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace arbor {
namespace {

unsigned long long allocations() {
  return g_allocations.load(std::memory_order_relaxed);
}
unsigned long long marked_allocations() {
  return g_marked_allocations.load(std::memory_order_relaxed);
}
// Marks the calling thread as one whose allocations marked_allocations() counts.
void mark_this_thread() {
  t_marked = true;
}

constexpr int kWarmUp = 500;
constexpr int kMeasured = 5000;

// Reads `warm_up` lines, then `measured` lines; the allocations `count` saw meanwhile, or -1
// if a line failed.
template <ReadStream S>
Task<long long> allocations_over_lines(BufferedReader<S>& reader, int warm_up, int measured,
                                       unsigned long long (*count)()) {
  for (int i = 0; i < warm_up; ++i) {
    if (!co_await reader.read_line()) co_return -1;
    mark_this_thread();
  }
  const unsigned long long before = count();
  for (int i = 0; i < measured; ++i) {
    if (!co_await reader.read_line()) co_return -1;
    mark_this_thread();  // (one worker: always the same thread, but say so rather than assume)
  }
  co_return static_cast<long long>(count() - before);
}

TEST(BufferedAllocations, NonePerLineOverAScriptedStream) {
  auto rt = test::make_runtime(test::engine_variants().front(), 1);
  ASSERT_TRUE(rt);
  std::string text;
  for (int i = 0; i < kWarmUp + kMeasured; ++i)
    text += "a line of text number " + std::to_string(i) + "\r\n";
  std::vector<std::size_t> cuts;  // reads of 1000 bytes: lines split across them
  for (std::size_t at = 1000; at < text.size(); at += 1000)
    cuts.push_back(at);
  auto stream = test::ScriptedStream::split(text, cuts);
  BufferedReader reader(stream, 4096);
  EXPECT_EQ(rt->block_on(allocations_over_lines(reader, kWarmUp, kMeasured, allocations)), 0);
}

class BufferedAllocationsTcp : public ::testing::TestWithParam<std::string> {};

Task<bool> write_lines(TcpStream& out, int count) {
  BufferedWriter writer(out, 4096);
  for (int i = 0; i < count; ++i) {
    if (!co_await write_line(writer, "a line of text, the same every time")) co_return false;
    mark_this_thread();
  }
  co_return (co_await writer.flush()).has_value();
}

Task<long long> lines_over_tcp(Runtime& rt) {
  auto listener = TcpListener::bind(rt, Address::loopback_v4(0));
  if (!listener) co_return -2;
  auto accepted = rt.spawn(listener->accept());
  auto client = co_await TcpStream::connect(rt, *listener->local_address());
  auto server = co_await std::move(accepted);
  if (!client || !server) co_return -2;
  auto writer = rt.spawn(write_lines(*client, kWarmUp + kMeasured));
  BufferedReader reader(*server, 4096);
  const long long n =
      co_await allocations_over_lines(reader, kWarmUp, kMeasured, marked_allocations);
  if (!co_await std::move(writer)) co_return -3;
  co_return n;
}

TEST_P(BufferedAllocationsTcp, NonePerLineOverLoopback) {
  auto rt = test::make_runtime(GetParam(), 1);
  ASSERT_TRUE(rt);
  EXPECT_EQ(rt->block_on(lines_over_tcp(*rt)), 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, BufferedAllocationsTcp,
                         ::testing::ValuesIn(test::engine_variants()), test::engine_name);

}  // namespace
}  // namespace arbor
