// arbor::asio::Stream at the edges (review of the Asio interop), on every engine: empty
// reads and writes, a gather list longer than the 16 a write takes at once, and a handler
// that destroys the stream while the other direction is still pending.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "arbor/asio/asio.hpp"
#include "asio_support.hpp"

namespace {

namespace net = boost::asio;
using arbor::asio::use_task;

class AsioStreamEdges : public arbor::test::AsioStreamFixture {};

struct Seen {
  boost::system::error_code ec;
  std::size_t n = 0;
  bool inside_initiation = false;
  bool on_worker = false;
};

// Empty buffers (none, or only zero-length ones) complete with 0 bytes and no error, posted.
TEST_P(AsioStreamEdges, EmptyReadsAndWritesCompleteWithZeroAndNotInline) {
  std::array<std::promise<Seen>, 4> done;
  net::post(*ctx, [&] {
    // Inline means on this thread before this function returns; a posted handler may run on
    // another worker meanwhile, which is not inline (ASan's timing showed it on uring).
    auto initiating = std::make_shared<std::atomic<bool>>(true);
    const auto initiator = std::this_thread::get_id();
    auto record = [&, initiating, initiator](int i) {
      return [&, i, initiating, initiator](boost::system::error_code ec, std::size_t n) {
        const bool inline_call = initiating->load() && std::this_thread::get_id() == initiator;
        done[static_cast<std::size_t>(i)].set_value({ec, n, inline_call, on_worker()});
      };
    };
    std::array<net::mutable_buffer, 2> empty_reads{net::mutable_buffer(), net::mutable_buffer()};
    std::array<net::const_buffer, 3> empty_writes{};
    stream->async_read_some(net::mutable_buffer(), record(0));
    stream->async_read_some(empty_reads, record(1));
    stream->async_write_some(net::const_buffer(), record(2));
    stream->async_write_some(empty_writes, record(3));
    initiating->store(false);
  });
  for (auto& d : done) {
    auto s = d.get_future().get();
    EXPECT_FALSE(s.ec) << s.ec.message();
    EXPECT_EQ(s.n, 0u);
    EXPECT_FALSE(s.inside_initiation);
    EXPECT_TRUE(s.on_worker);
  }
  // The slots are free again: a real read still works.
  const char text[] = "x";
  ASSERT_TRUE(rt->block_on(peer.write_all(std::as_bytes(std::span(text, 1)))));
  std::promise<Seen> read;
  std::array<char, 4> buffer{};
  net::post(*ctx, [&] {
    stream->async_read_some(net::buffer(buffer), [&](boost::system::error_code ec, std::size_t n) {
      read.set_value({ec, n});
    });
  });
  auto r = read.get_future().get();
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.n, 1u);
}

arbor::Task<arbor::Result<std::size_t>> write_many(arbor::asio::Stream& s,
                                                   const std::vector<net::const_buffer>& parts,
                                                   bool some) {
  if (some) {
    auto r = co_await s.async_write_some(parts, use_task);
    co_return r;
  }
  auto r = co_await net::async_write(s, parts, use_task);
  co_return r;
}

// 40 one-byte buffers with empty ones between them: write_some takes the first 16 non-empty
// ones, async_write all of them, in order.
TEST_P(AsioStreamEdges, AGatherListLongerThanSixteenIsWrittenInOrder) {
  std::vector<char> bytes(40);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>('A' + i);
  std::vector<net::const_buffer> parts;
  for (auto& b : bytes) {
    parts.push_back(net::buffer(&b, 1));
    parts.push_back(net::const_buffer());
  }
  auto some = rt->block_on(write_many(*stream, parts, true));
  ASSERT_TRUE(some) << some.error().message();
  ASSERT_GE(*some, 1u);
  EXPECT_LE(*some, 16u);
  auto all = rt->block_on(write_many(*stream, parts, false));
  ASSERT_TRUE(all) << all.error().message();
  EXPECT_EQ(*all, 40u);
  std::vector<std::byte> got(*some + 40);
  ASSERT_TRUE(rt->block_on(peer.read_exact(got)));
  std::string expected(bytes.begin(), bytes.begin() + static_cast<long>(*some));
  expected.append(bytes.begin(), bytes.end());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()), expected);
}

// A write's handler destroys the stream while a read is pending: the read ends aborted, on a
// worker, and nothing touches the freed stream (ASan).
TEST_P(AsioStreamEdges, AHandlerThatDestroysTheStreamAbortsTheOtherDirection) {
  std::promise<Seen> read, write;
  std::array<char, 16> buffer{};
  const char text[] = "bye";
  net::post(*ctx, [&] {
    stream->async_read_some(net::buffer(buffer), [&](boost::system::error_code ec, std::size_t n) {
      read.set_value({ec, n, false, on_worker()});
    });
    stream->async_write_some(net::buffer(text, 3),
                             [&](boost::system::error_code ec, std::size_t n) {
                               stream.reset();  // the Stream goes inside its own completion
                               write.set_value({ec, n, false, on_worker()});
                             });
  });
  auto w = write.get_future().get();
  EXPECT_FALSE(w.ec) << w.ec.message();
  EXPECT_GE(w.n, 1u);
  auto r = read.get_future().get();
  EXPECT_EQ(r.ec, net::error::operation_aborted) << r.ec.message();
  EXPECT_TRUE(r.on_worker);
}

// Counts calls and destructions of the live handler (moved-from copies do not count).
struct CountedHandler {
  std::atomic<int>* calls;
  std::atomic<int>* destroyed;
  bool live = true;
  CountedHandler(std::atomic<int>* c, std::atomic<int>* d) : calls(c), destroyed(d) {}
  CountedHandler(CountedHandler&& o) noexcept : calls(o.calls), destroyed(o.destroyed) {
    o.live = false;
  }
  ~CountedHandler() {
    if (live) destroyed->fetch_add(1);
  }
  void operator()(boost::system::error_code, std::size_t) { calls->fetch_add(1); }
};

// The Context goes while a read is pending (context.hpp: its handlers are then destroyed
// without being called). Before the fix, the read's completion on a worker dispatched the
// handler inline and called it, after its Context (and the services a Beast handler uses)
// had gone; only handlers that were queued were destroyed uncalled.
TEST_P(AsioStreamEdges, AReadPendingWhenTheContextGoesDoesNotCallItsHandler) {
  std::atomic<int> calls{0}, destroyed{0};
  std::array<char, 16> buffer{};
  std::promise<void> started;
  std::int64_t work_inside = 0;  // the posted function's own unit and the read's
  net::post(*ctx, [&] {
    stream->async_read_some(net::buffer(buffer), CountedHandler(&calls, &destroyed));
    work_inside = ctx->outstanding_work();
    started.set_value();
  });
  started.get_future().wait();
  // The posted function has returned once its unit of work is given back (the last thing a
  // queued function does, executor.hpp), and the Context may go only then.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ctx->outstanding_work() != work_inside - 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_EQ(ctx->outstanding_work(), work_inside - 1);
  ctx.reset();
  const char text[] = "late";
  ASSERT_TRUE(rt->block_on(peer.write_all(std::as_bytes(std::span(text, 4)))));
  for (int i = 0; i < 5000 && calls.load() + destroyed.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_EQ(destroyed.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, AsioStreamEdges,
                         ::testing::ValuesIn(arbor::test::engine_variants()),
                         arbor::test::engine_name);

}  // namespace
