// Names: resolve() and TcpStream::connect by name, on loopback only. What a test may rely on:
// numeric addresses, and "localhost" naming 127.0.0.1 and/or ::1 (nothing else; this file
// never edits /etc/hosts). Cancellation is tested with the blocking pool held full by a gate,
// so a lookup is certainly still waiting; Happy Eyeballs' stagger with the paused clock and a
// listener whose full backlog drops new connections' SYNs (a connect that never answers).
#include <gtest/gtest.h>

#if defined(_WIN32)
#include <ws2tcpip.h>
#else
#include <netdb.h>
#endif

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "arbor/arbor.hpp"
#include "runtime_support.hpp"
#include "thread_gate.hpp"

namespace arbor {
namespace {

using namespace std::chrono_literals;

using test::ThreadGate;

std::unique_ptr<Runtime> make(const std::string& engine, int max_blocking = 64) {
  RuntimeOptions o;
  o.engine = test::engine_options(engine);
  o.scheduler = test::scheduler_options(engine);
  o.scheduler.workers = 2;
  o.blocking.max_threads = max_blocking;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt) << rt.error().message();
  return rt ? std::move(*rt) : nullptr;
}

std::string any_engine() {
  return io::Engine::available().front();
}

bool is_loopback(const Address& a) {
  const std::string s = a.to_string();
  return s.starts_with("127.") || s.starts_with("[::1]");
}

using Lookup = Result<std::vector<Address>>;

Lookup run(Runtime& rt, Task<Lookup> task) {
  return rt.block_on(std::move(task));
}

TEST(Resolve, NumericHostsAreParsedWithoutAThread) {
  auto rt = make(any_engine());
  auto v4 = run(*rt, resolve(*rt, "127.0.0.1", 80));
  auto v6 = run(*rt, resolve(*rt, "::1", 443));
  auto bracketed = run(*rt, resolve(*rt, "[::1]:8080"));
  ASSERT_TRUE(v4 && v6 && bracketed);
  ASSERT_EQ(v4->size(), 1u);
  EXPECT_EQ((*v4)[0].to_string(), "127.0.0.1:80");
  ASSERT_EQ(v6->size(), 1u);
  EXPECT_EQ((*v6)[0].to_string(), "[::1]:443");
  ASSERT_EQ(bracketed->size(), 1u);
  EXPECT_EQ((*bracketed)[0].to_string(), "[::1]:8080");
  EXPECT_EQ(rt->blocking_threads(), 0);  // the pool never started
}

TEST(Resolve, LocalhostGivesLoopbackAddressesEachOnce) {
  auto rt = make(any_engine());
  auto found = run(*rt, resolve(*rt, "localhost:7"));
  ASSERT_TRUE(found) << found.error().message();
  ASSERT_FALSE(found->empty());
  for (const Address& a : *found) {
    EXPECT_TRUE(is_loopback(a)) << a.to_string();
    EXPECT_EQ(a.port(), 7);
    EXPECT_EQ(std::count(found->begin(), found->end(), a), 1) << a.to_string();
  }
}

TEST(Resolve, BadInputIsInvalidArgument) {
  auto rt = make(any_engine());
  const std::string nul("local\0host", 10);
  const std::string long_name(300, 'a');
  const std::vector<std::string> bad = {"",
                                        ":80",
                                        "localhost",
                                        "localhost:",
                                        "localhost:65536",
                                        "localhost:-1",
                                        "localhost:8x",
                                        "::1:80",
                                        "[::1]80",
                                        "[::1:80",
                                        nul + ":80",
                                        long_name + ":80"};
  for (const auto& text : bad) {
    auto r = run(*rt, resolve(*rt, text));
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error(), std::errc::invalid_argument) << text;
  }
  auto empty = run(*rt, resolve(*rt, "", 80));
  auto with_nul = run(*rt, resolve(*rt, nul, 80));
  auto too_long = run(*rt, resolve(*rt, long_name, 80));
  EXPECT_EQ(empty.error(), std::errc::invalid_argument);
  EXPECT_EQ(with_nul.error(), std::errc::invalid_argument);
  EXPECT_EQ(too_long.error(), std::errc::invalid_argument);
  EXPECT_EQ(rt->blocking_threads(), 0);  // refused before any lookup
}

// What the resolver says, as errors. Checked on getaddrinfo's codes directly rather than by
// looking up a name that does not exist: such a lookup asks the machine's name server, and
// tests send nothing beyond loopback.
TEST(Resolve, ResolverFailuresAreResolveErrors) {
  using detail::from_getaddrinfo;
  EXPECT_EQ(from_getaddrinfo(EAI_NONAME), ResolveErrc::host_not_found);
  EXPECT_EQ(from_getaddrinfo(EAI_AGAIN), ResolveErrc::try_again);
  EXPECT_EQ(from_getaddrinfo(EAI_FAIL), ResolveErrc::failed);
  EXPECT_EQ(from_getaddrinfo(EAI_MEMORY), std::errc::not_enough_memory);
  EXPECT_EQ(from_getaddrinfo(EAI_FAMILY), std::errc::invalid_argument);
  EXPECT_EQ(from_getaddrinfo(-12345), ResolveErrc::failed);  // a code arbor does not know
  EXPECT_EQ(&from_getaddrinfo(EAI_NONAME).category(), &resolve_category());
  EXPECT_STREQ(resolve_category().name(), "arbor.resolve");
  EXPECT_FALSE(from_getaddrinfo(EAI_NONAME).message().empty());
}

TEST(Resolve, ATimeoutEndsTheWaitWhileTheLookupWaitsForAThread) {
  auto rt = make(any_engine(), /*max_blocking=*/1);
  ThreadGate gate;
  auto holder = rt->spawn_blocking([&gate] { gate.pass(); });
  ASSERT_TRUE(gate.wait_arrived(1));
  auto r = run(*rt, resolve(*rt, "localhost:80", 20ms));  // queued behind the held job
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::timed_out);
  gate.open();  // the lookup then runs, and its answer is dropped
}

TEST(Resolve, AbortingTheTaskEndsTheWaitWithOperationCanceled) {
  auto rt = make(any_engine(), /*max_blocking=*/1);
  ThreadGate gate;
  auto holder = rt->spawn_blocking([&gate] { gate.pass(); });
  ASSERT_TRUE(gate.wait_arrived(1));
  auto lookup = rt->spawn_abortable(resolve(*rt, "localhost:80"));
  lookup.abort();
  auto r = rt->block_on([](JoinHandle<Lookup> h) -> Task<Lookup> {
    co_return co_await std::move(h);
  }(std::move(lookup)));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::operation_canceled);
  gate.open();
}

TEST(HappyEyeballs, TheFamiliesAlternateFromTheFirstChoice) {
  const Address a6 = *Address::parse("[::1]:1"), b6 = *Address::parse("[::2]:1"),
                c6 = *Address::parse("[::3]:1");
  const Address a4 = *Address::parse("127.0.0.1:1"), b4 = *Address::parse("127.0.0.2:1");
  EXPECT_EQ(connection_attempt_order({a6, b6, c6, a4, b4}),
            (std::vector<Address>{a6, a4, b6, b4, c6}));
  EXPECT_EQ(connection_attempt_order({a4, a6, b6, c6}), (std::vector<Address>{a4, a6, b6, c6}));
  EXPECT_EQ(connection_attempt_order({b4, a4}), (std::vector<Address>{b4, a4}));
  EXPECT_TRUE(connection_attempt_order({}).empty());
}

// Every attempt failed: the report does not depend on which attempt ended last (on wine, a
// ::1 that is not configured and 127.0.0.1's refusal race), and an answer from a host beats an
// address this host cannot use.
TEST(HappyEyeballs, AllFailedReportsTheMostTellingErrorWhateverEndedLast) {
  const auto refused = std::make_error_code(std::errc::connection_refused);
  const auto reset = std::make_error_code(std::errc::connection_reset);
  const auto unreachable = std::make_error_code(std::errc::network_unreachable);
  const auto not_here = std::make_error_code(std::errc::address_not_available);
  const auto timed_out = std::make_error_code(std::errc::timed_out);
  const auto cancelled = std::make_error_code(std::errc::operation_canceled);
  EXPECT_EQ(connection_failure({unreachable, refused}), refused);
  EXPECT_EQ(connection_failure({refused, unreachable}), refused);
  EXPECT_EQ(connection_failure({not_here, timed_out}), timed_out);
  EXPECT_EQ(connection_failure({timed_out, refused}), refused);
  EXPECT_EQ(connection_failure({reset, refused}), reset);  // equals: the earlier attempt
  EXPECT_EQ(connection_failure({not_here, unreachable}), not_here);
  EXPECT_EQ(connection_failure({{}, cancelled, unreachable}), unreachable);
  EXPECT_EQ(connection_failure({cancelled, {}}), cancelled);
  EXPECT_EQ(connection_failure({}), cancelled);
}

class ConnectByNameTest : public ::testing::TestWithParam<std::string> {};

// A listener on 127.0.0.1 only: whatever order "localhost" gives, a ::1 attempt is refused
// and the v4 one wins.
TEST_P(ConnectByNameTest, LocalhostReachesAV4OnlyListener) {
  auto rt = make(GetParam());
  auto echoed = rt->block_on([](Runtime& runtime) -> Task<Result<bool>> {
    auto listener = TcpListener::bind(runtime, Address::loopback_v4(0));
    if (!listener) co_return listener.error();
    auto accepted = runtime.spawn(listener->accept());
    const std::string name = "localhost:" + std::to_string(listener->local_address()->port());
    auto client = co_await TcpStream::connect(runtime, name, 10s);
    if (!client) co_return client.error();
    auto server = co_await std::move(accepted);
    if (!server) co_return server.error();
    const std::byte one[1] = {std::byte{42}};
    std::byte got[1];
    if (auto w = co_await client->write_all(one); !w) co_return w.error();
    if (auto r = co_await server->read_exact(got); !r) co_return r.error();
    co_return got[0] == one[0];
  }(*rt));
  ASSERT_TRUE(echoed) << echoed.error().message();
  EXPECT_TRUE(*echoed);
}

TEST_P(ConnectByNameTest, NobodyListeningIsConnectionRefused) {
  auto rt = make(GetParam());
  auto r = rt->block_on([](Runtime& runtime) -> Task<Result<TcpStream>> {
    // A port just freed: nobody listens on it (close() means closed, close_test.cpp).
    std::uint16_t port = 0;
    {
      auto listener = TcpListener::bind(runtime, Address::loopback_v4(0));
      if (!listener) co_return listener.error();
      port = listener->local_address()->port();
    }
    auto by_name = co_await TcpStream::connect(runtime, "localhost:" + std::to_string(port));
    if (by_name || by_name.error() != std::errc::connection_refused) co_return by_name;
    co_return co_await TcpStream::connect(runtime, "127.0.0.1:" + std::to_string(port));
  }(*rt));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::connection_refused) << r.error().message();
}

TEST_P(ConnectByNameTest, ARefusedFirstAddressFallsThroughToTheNext) {
  auto rt = make(GetParam());
  auto r = rt->block_on([](Runtime& runtime) -> Task<Result<void>> {
    auto listener = TcpListener::bind(runtime, Address::loopback_v4(0));
    if (!listener) co_return listener.error();
    std::uint16_t closed = 0;
    {
      auto other = TcpListener::bind(runtime, Address::loopback_v4(0));
      if (!other) co_return other.error();
      closed = other->local_address()->port();
    }
    auto accepted = runtime.spawn(listener->accept());
    std::vector<Address> addresses = {Address::loopback_v6(closed), Address::loopback_v4(closed),
                                      *listener->local_address()};
    auto client = co_await connect_first(runtime, addresses);
    if (!client) co_return client.error();
    auto server = co_await std::move(accepted);
    if (!server) co_return server.error();
    co_return Result<void>{};
  }(*rt));
  EXPECT_TRUE(r) << r.error().message();
}

#if defined(__linux__)
// The stagger: the first address never answers (a listener whose one-slot backlog is full
// drops new SYNs), so only the 250 ms timer starts the second attempt. On the paused clock
// the runtime is idle while the connect hangs, so the clock jumps to that timer at once.
// Tried one after the other, the hour's timeout would fire first.
TEST_P(ConnectByNameTest, AnAddressThatNeverAnswersOnlyDelaysTheNextByTheStagger) {
  TestClock clock;
  auto rt = make(GetParam());
  const auto start = clock.now();
  auto r = rt->block_on([](Runtime& runtime) -> Task<Result<void>> {
    auto good = TcpListener::bind(runtime, Address::loopback_v4(0));
    auto full = TcpListener::bind(runtime, Address::loopback_v4(0), {.backlog = 0});
    if (!good) co_return good.error();
    if (!full) co_return full.error();
    // Fill the full one's accept queue (backlog 0 holds one connection; nobody accepts).
    auto filler = co_await TcpStream::connect(runtime, *full->local_address(), 10s);
    if (!filler) co_return filler.error();
    auto accepted = runtime.spawn(good->accept());
    auto connecting =
        connect_first(runtime, {*full->local_address(), *good->local_address()}, 250ms);
    auto client = co_await with_timeout(1h, std::move(connecting));
    if (!client) co_return client.error();
    auto server = co_await std::move(accepted);
    if (!server) co_return server.error();
    co_return Result<void>{};
  }(*rt));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_GE(clock.now() - start, 250ms);  // not before the stagger...
  EXPECT_LT(clock.now() - start, 1h);     // ...and not after the first attempt gave up
}
#endif

INSTANTIATE_TEST_SUITE_P(Engines, ConnectByNameTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
