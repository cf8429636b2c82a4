// A TLS stream allocates nothing per record in steady state: operator new and OpenSSL's
// allocator (CRYPTO_set_mem_functions, installed before OpenSSL's first allocation) are
// counted, except OpenSSL 3.0's own per-record write bookkeeping (below), which is reported, on the
// threads that run the client's and the server's tasks (each marks its thread as it runs; one
// worker), and thousands of 16 KiB round trips through a TLS echo after a warm-up add none. A
// binary of its own: it replaces the global operator new. A poller thread's allocations (the
// "-pollers" variants) are the scheduler's, not per record, and not counted (as in
// buffered_alloc_test.cpp).
#include <gtest/gtest.h>
#include <openssl/crypto.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string_view>

#include "tls_support.hpp"

#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<unsigned long long> g_marked{0};
thread_local bool t_marked = false;

void count() {
  if (t_marked) g_marked.fetch_add(1, std::memory_order_relaxed);
}
// OpenSSL 3.0's record layer allocates its WPACKET bookkeeping (crypto/packet.c, 40 bytes a
// sub-packet, freed before SSL_write returns) for every record it writes: inside the library,
// out of reach of any BIO. Counted apart, so that everything else must be zero.
std::atomic<unsigned long long> g_packet{0};
void* crypto_malloc(std::size_t size, const char* file, int) {
  if (t_marked && file != nullptr && std::string_view(file).ends_with("crypto/packet.c"))
    g_packet.fetch_add(1, std::memory_order_relaxed);
  else
    count();
  return std::malloc(size);
}
void* crypto_realloc(void* p, std::size_t size, const char*, int) {
  count();
  return std::realloc(p, size);
}
void crypto_free(void* p, const char*, int) {
  std::free(p);
}
// Before main, so before OpenSSL allocates anything (it refuses once it has).
const bool g_installed = CRYPTO_set_mem_functions(crypto_malloc, crypto_realloc, crypto_free);
}  // namespace

void* operator new(std::size_t size) {
  count();
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

constexpr int kWarmUp = 200;
constexpr int kMeasured = 2000;
constexpr std::size_t kMessage = 16 * 1024;

class TlsAllocTest : public ::testing::TestWithParam<std::string> {};

// Echoes `rounds` messages, marking its thread; "ok" or what failed.
Task<std::string> serve(test::TlsTcp& stream, int rounds) {
  std::vector<std::byte> buffer(kMessage);
  for (int i = 0; i < rounds; ++i) {
    auto r = co_await stream.read_exact(buffer);
    t_marked = true;
    if (!r) co_return "server read: " + r.error().message();
    auto w = co_await stream.write_all(buffer);
    t_marked = true;
    if (!w) co_return "server write: " + w.error().message();
  }
  co_return "ok";
}

TEST_P(TlsAllocTest, NonePerRecordInSteadyState) {
  ASSERT_TRUE(g_installed) << "OpenSSL allocated before the counters were installed";
  ASSERT_EQ(test::certificates().error, "");
  g_packet = 0;
  auto rt = test::make_runtime(GetParam(), 1);
  ASSERT_TRUE(rt);
  auto server = test::server_context();
  auto client = test::client_context();
  auto body = [&](Runtime& runtime) -> Task<long long> {
    auto pair = co_await test::handshake_pair(runtime, client, server, "localhost");
    if (!pair.client || !pair.server) co_return -1;
    auto serving = runtime.spawn(serve(*pair.server, kWarmUp + kMeasured));
    std::vector<std::byte> out(kMessage, std::byte{7}), in(kMessage);
    unsigned long long before = 0;
    for (int i = 0; i < kWarmUp + kMeasured; ++i) {
      if (i == kWarmUp) before = g_marked.load(std::memory_order_relaxed);
      auto w = co_await pair.client->write_all(out);
      t_marked = true;
      auto r = co_await pair.client->read_exact(in);
      t_marked = true;
      if (!w || !r) co_return -2;
    }
    const auto after = g_marked.load(std::memory_order_relaxed);
    ::testing::Test::RecordProperty("openssl_packet_allocations_per_round_trip",
                                    std::to_string(g_packet.load() / (kWarmUp + kMeasured)));
    auto said = co_await std::move(serving);
    if (said != "ok") co_return -3;
    co_return static_cast<long long>(after - before);
  };
  EXPECT_EQ(rt->block_on(body(*rt)), 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, TlsAllocTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
