// Channels (mpsc bounded and unbounded, oneshot, broadcast, watch): message and waiter order,
// cancellation while waiting (no message lost or duplicated, the next waiter still served),
// close while waiting (from either side), many producers and consumers across workers (run
// under TSan too), and what a failed send hands back.
//
// Tasks are made to wait in a known order by waiting until the channel reports them parked
// (or, where it cannot, until the task says it is about to wait and the channel is full);
// nothing sleeps and nothing asserts on timing.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "arbor/arbor.hpp"
#include "async_support.hpp"
#include "runtime_support.hpp"

namespace arbor {
namespace {

using test::canceled;
using test::Cancellable;
using test::until;

bool is(std::error_code e, Errc c) {
  return e == make_error_code(c);
}

// --------------------------------------------------------------------------- mpsc bounded

Task<SendResult<int>> send_one(mpsc::Sender<int>& tx, int v, std::atomic<int>& started) {
  started.fetch_add(1);
  co_return co_await tx.send(v);
}

Task<Result<int>> recv_one(mpsc::Receiver<int>& rx) {
  co_return co_await rx.recv();
}

TEST(Channels, ACapacityOfZeroIsRefusedWithAClearError) {
  EXPECT_THROW(mpsc::channel<int>(0), std::invalid_argument);
  EXPECT_THROW(broadcast::channel<int>(0), std::invalid_argument);
  auto [tx, rx] = mpsc::channel<int>(1);  // the smallest that holds a message
  EXPECT_TRUE(tx.try_send(1));
  EXPECT_FALSE(tx.try_send(2));
}

// A message whose move may throw would let a hand-over under the channel's lock take a waiter
// off its list and then throw before waking it (a receiver that never wakes). The channels that
// move messages under their lock refuse such a type when they are made, at compile time.
struct MoveMayThrow {
  MoveMayThrow() = default;
  MoveMayThrow(const MoveMayThrow&) = default;
  MoveMayThrow(MoveMayThrow&&) noexcept(false) {}
};
template <class T>
concept MakesMpsc = requires {
  mpsc::channel<T>(1);
};
template <class T>
concept MakesUnboundedMpsc = requires {
  mpsc::unbounded_channel<T>();
};
template <class T>
concept MakesOneshot = requires {
  oneshot::channel<T>();
};
template <class T>
concept MakesBroadcast = requires {
  broadcast::channel<T>(1);
};

TEST(Channels, AMessageWhoseMoveMayThrowIsRefusedAtCompileTime) {
  static_assert(!MakesMpsc<MoveMayThrow> && !MakesUnboundedMpsc<MoveMayThrow>);
  static_assert(!MakesOneshot<MoveMayThrow> && !MakesBroadcast<MoveMayThrow>);
  // The same channels take ordinary messages, and a throwing-move type wrapped in a pointer.
  static_assert(MakesMpsc<std::string> && MakesUnboundedMpsc<std::vector<int>>);
  static_assert(MakesOneshot<std::unique_ptr<MoveMayThrow>> && MakesBroadcast<std::string>);
  auto [tx, rx] = mpsc::channel<std::unique_ptr<MoveMayThrow>>(1);
  EXPECT_TRUE(tx.try_send(std::make_unique<MoveMayThrow>()));
  EXPECT_TRUE(rx.try_recv().has_value());
}

TEST(MpscBounded, TrySendAndTryRecv) {
  auto [tx, rx] = mpsc::channel<std::string>(2);
  EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_empty));
  EXPECT_TRUE(tx.try_send("a"));
  EXPECT_TRUE(tx.try_send("b"));
  auto full = tx.try_send("c");
  EXPECT_TRUE(is(full.error(), Errc::channel_full));
  EXPECT_EQ(full.take_message(), "c");  // the caller has it back
  EXPECT_EQ(*rx.try_recv(), "a");
  EXPECT_EQ(*rx.try_recv(), "b");
  EXPECT_EQ(tx.capacity(), 2u);
}

TEST(MpscBounded, WaitingSendersAreServedInOrder) {
  // One worker: a sender that has started runs on to its park before anything else runs, so
  // waiting for `started` orders the senders in the queue.
  auto rt = test::make_runtime("auto", 1);
  auto [tx, rx] = mpsc::channel<int>(1);
  ASSERT_TRUE(tx.try_send(0));
  std::atomic<int> started{0};
  std::vector<JoinHandle<SendResult<int>>> senders;
  for (int i = 1; i <= 4; ++i) {
    senders.push_back(rt->spawn(send_one(tx, i, started)));
    ASSERT_TRUE(until([&] { return started.load() == i; }));
  }
  rt->block_on([]() -> Task<void> { co_await yield(); }());
  EXPECT_EQ(rx.size(), 1u);
  // The queue of senders is internal; its order shows in the messages.
  std::vector<int> got;
  for (int i = 0; i <= 4; ++i)
    got.push_back(*rt->block_on(recv_one(rx)));
  for (auto& s : senders)
    EXPECT_TRUE(s.join_blocking());
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3, 4}));
}

// A waiting sender is let in once half the ring is free; until then a newcomer may not pass it
// (try_send says full although there is room).
TEST(MpscBounded, WaitingSenderIsLetInAtHalfAndNotOvertaken) {
  auto rt = test::make_runtime("auto", 1);
  auto [tx, rx] = mpsc::channel<int>(4);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(tx.try_send(i));
  std::atomic<int> started{0};
  auto a = rt->spawn(send_one(tx, 4, started));
  ASSERT_TRUE(until([&] { return started.load() == 1; }));
  rt->block_on([]() -> Task<void> { co_await yield(); }());  // one worker: it has parked
  EXPECT_EQ(*rx.try_recv(), 0);
  EXPECT_EQ(rx.size(), 3u);
  auto overtaker = tx.try_send(99);
  EXPECT_TRUE(is(overtaker.error(), Errc::channel_full));
  EXPECT_EQ(*rx.try_recv(), 1);  // half free: the waiting sender's message goes in
  EXPECT_EQ(rx.size(), 3u);
  EXPECT_TRUE(a.join_blocking());
  for (int want : {2, 3, 4})
    EXPECT_EQ(*rx.try_recv(), want);
}

TEST(MpscBounded, CancelledSenderGetsItsMessageBackAndTheNextIsDelivered) {
  auto rt = test::make_runtime("auto", 1);
  auto [tx, rx] = mpsc::channel<int>(1);
  ASSERT_TRUE(tx.try_send(0));
  std::atomic<int> started{0};
  Cancellable c(*rt);
  auto a = rt->spawn_in(send_one(tx, 1, started), &c.context);
  auto b = rt->spawn(send_one(tx, 2, started));
  // One worker: both have run to their send (and parked) once started is 2 and the worker
  // has come back to us.
  ASSERT_TRUE(until([&] { return started.load() == 2; }));
  rt->block_on([]() -> Task<void> { co_await yield(); }());
  c.cancel();
  auto ra = a.join_blocking();
  EXPECT_TRUE(canceled(ra.error()));
  EXPECT_EQ(ra.take_message(), 1);
  EXPECT_EQ(*rt->block_on(recv_one(rx)), 0);
  EXPECT_EQ(*rt->block_on(recv_one(rx)), 2);
  EXPECT_TRUE(b.join_blocking());
}

// One worker: the receiver moves the waiting sender's message into the queue and wakes it,
// then cancels it before it runs. The send has happened: it reports success, the message
// arrives once.
TEST(MpscBounded, SenderWhoseMessageWasTakenBeforeItsCancellationSucceeds) {
  auto rt = test::make_runtime("auto", 1);
  auto [tx, rx] = mpsc::channel<int>(1);
  ASSERT_TRUE(tx.try_send(0));
  std::atomic<int> started{0};
  Cancellable c(*rt);
  auto a = rt->spawn_in(send_one(tx, 1, started), &c.context);
  ASSERT_TRUE(until([&] { return started.load() == 1; }));
  rt->block_on([]() -> Task<void> { co_await yield(); }());
  auto first = rt->block_on([](mpsc::Receiver<int>& r, Cancellable& cancel) -> Task<int> {
    auto v = co_await r.recv();
    cancel.cancel();
    co_return *v;
  }(rx, c));
  EXPECT_EQ(first, 0);
  EXPECT_TRUE(a.join_blocking());
  EXPECT_EQ(*rx.try_recv(), 1);
  EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_empty));
}

TEST(MpscBounded, CancelledReceiverLeavesMessagesForTheNextRecv) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = mpsc::channel<int>(4);
  Cancellable c(*rt);
  std::atomic<bool> parked{false};
  auto r = rt->spawn_in(
      [](mpsc::Receiver<int>& rx_in, std::atomic<bool>& p) -> Task<Result<int>> {
        p = true;
        co_return co_await rx_in.recv();
      }(rx, parked),
      &c.context);
  ASSERT_TRUE(until([&] { return parked.load(); }));
  c.cancel();
  EXPECT_TRUE(canceled(r.join_blocking().error()));
  ASSERT_TRUE(tx.try_send(7));
  EXPECT_EQ(*rt->block_on(recv_one(rx)), 7);
}

TEST(MpscBounded, DroppingTheLastSenderWakesTheReceiverAfterTheQueue) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = mpsc::channel<int>(4);
  ASSERT_TRUE(tx.try_send(1));
  auto tx2 = tx;
  EXPECT_EQ(*rt->block_on(recv_one(rx)), 1);
  std::atomic<bool> parked{false};
  auto r = rt->spawn([](mpsc::Receiver<int>& rx_in, std::atomic<bool>& p) -> Task<Result<int>> {
    p = true;
    co_return co_await rx_in.recv();
  }(rx, parked));
  ASSERT_TRUE(until([&] { return parked.load(); }));
  { auto gone = std::move(tx); }
  { auto gone = std::move(tx2); }
  EXPECT_TRUE(is(r.join_blocking().error(), Errc::channel_closed));
}

TEST(MpscBounded, ClosingTheReceiverFailsWaitingSendsWithTheirMessages) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = mpsc::channel<int>(1);
  ASSERT_TRUE(tx.try_send(0));
  std::atomic<int> started{0};
  auto a = rt->spawn(send_one(tx, 1, started));
  ASSERT_TRUE(until([&] { return started.load() == 1; }));
  // It may not have parked yet; either way close() must fail it with its message.
  rx.close();
  auto ra = a.join_blocking();
  EXPECT_TRUE(is(ra.error(), Errc::channel_closed));
  EXPECT_EQ(ra.take_message(), 1);
  EXPECT_TRUE(tx.is_closed());
  EXPECT_TRUE(is(tx.try_send(2).error(), Errc::channel_closed));
  EXPECT_EQ(*rx.try_recv(), 0);  // queued before close: still received
  EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_closed));
}

// close() while a recv waits (called by another task: a shutdown path holding the receiver)
// wakes that recv with channel_closed, as it would a recv started after close(); a sender is
// still alive, so nothing else would ever wake it. One worker: the closer runs only once the
// receiving task has parked.
TEST(MpscBounded, CloseWakesAWaitingRecv) {
  auto rt = test::make_runtime("auto", 1);
  auto [tx, rx] = mpsc::channel<int>(2);
  std::atomic<bool> parked{false};
  auto r = rt->spawn([](mpsc::Receiver<int>& rx_in, std::atomic<bool>& p) -> Task<Result<int>> {
    p = true;
    co_return co_await rx_in.recv();
  }(rx, parked));
  ASSERT_TRUE(until([&] { return parked.load(); }));
  rt->block_on([](mpsc::Receiver<int>& rx_in) -> Task<> {
    rx_in.close();
    co_return;
  }(rx));
  EXPECT_TRUE(is(tx.try_send(1).error(), Errc::channel_closed));
  if (!until([&] { return r.done(); }, std::chrono::seconds(10))) {
    ADD_FAILURE() << "the waiting recv was never woken";
    rt->shutdown();  // cancels it, so that nothing outlives the channel
    return;
  }
  EXPECT_TRUE(is(r.join_blocking().error(), Errc::channel_closed));
}

// with_timeout around a send: a send the deadline cuts returns its message (timed_out); a send
// that succeeded as the deadline passed reports the success, not timed_out (the message is in
// the channel: a retry would duplicate it).
TEST(MpscBounded, SendUnderATimeoutKeepsItsMessageAndItsSuccess) {
  using namespace std::chrono_literals;
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = mpsc::channel<std::unique_ptr<int>>(1);
  ASSERT_TRUE(tx.try_send(std::make_unique<int>(0)));
  rt->block_on([](mpsc::Sender<std::unique_ptr<int>>& tx_in) -> Task<> {
    auto cut = co_await with_timeout(Clock::now() - 1s, tx_in.send(std::make_unique<int>(1)));
    EXPECT_EQ(cut.error(), std::errc::timed_out);
    if (!cut.message()) {
      ADD_FAILURE() << "the message was lost";
      co_return;
    }
    EXPECT_EQ(*cut.take_message(), 1);
  }(tx));
  EXPECT_EQ(**rx.try_recv(), 0);
  // The deadline has fired (the token says so) when this send completes, at once, with room.
  auto late = rt->block_on([](mpsc::Sender<std::unique_ptr<int>>& tx_in) -> Task<bool> {
    auto r = co_await with_timeout(
        Clock::now() - 1s,
        [](mpsc::Sender<std::unique_ptr<int>>& t) -> Task<SendResult<std::unique_ptr<int>>> {
          while (!(co_await this_task::stop_token()).stop_requested())
            co_await yield();
          co_return co_await t.send(std::make_unique<int>(2));
        }(tx_in));
    co_return r.has_value();
  }(tx));
  EXPECT_TRUE(late) << "the message was sent, yet the send reported a failure";
  auto m = rx.try_recv();
  ASSERT_TRUE(m);
  EXPECT_EQ(**m, 2);
}

TEST(MpscBounded, DroppingTheReceiverClosesTheChannel) {
  auto [tx, rx] = mpsc::channel<std::unique_ptr<int>>(2);
  ASSERT_TRUE(tx.try_send(std::make_unique<int>(1)));
  { auto gone = std::move(rx); }
  auto r = tx.try_send(std::make_unique<int>(2));
  EXPECT_TRUE(is(r.error(), Errc::channel_closed));
  EXPECT_EQ(*r.take_message(), 2);
}

Task<void> produce(mpsc::Sender<std::uint64_t> tx, std::uint64_t id, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i)
    EXPECT_TRUE(co_await tx.send(id << 32 | i));
}

template <class Rx>
Task<std::uint64_t> consume(Rx& rx, std::uint64_t producers, std::uint64_t n) {
  std::vector<std::uint64_t> next(producers, 0);
  std::uint64_t count = 0;
  for (;;) {
    auto m = co_await rx.recv();
    if (!m) {
      EXPECT_TRUE(is(m.error(), Errc::channel_closed));
      break;
    }
    const std::uint64_t id = *m >> 32, seq = *m & 0xffffffffu;
    EXPECT_EQ(seq, next[id]) << "per-producer order";
    next[id] = seq + 1;
    ++count;
  }
  for (auto v : next)
    EXPECT_EQ(v, n);
  co_return count;
}

TEST(MpscBounded, ManyProducersAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  constexpr std::uint64_t kProducers = 8, kMessages = 5000;
  auto [tx, rx] = mpsc::channel<std::uint64_t>(8);
  auto consumer = rt->spawn(consume(rx, kProducers, kMessages));
  for (std::uint64_t p = 0; p < kProducers; ++p)
    rt->spawn(produce(tx, p, kMessages)).detach();
  { auto gone = std::move(tx); }
  EXPECT_EQ(consumer.join_blocking(), kProducers * kMessages);
}

// Producers cancelled at arbitrary moments while they wait on a full channel: every message
// is either received exactly once or handed back to its producer, never both or neither.
Task<std::uint64_t> produce_until_cancelled(mpsc::Sender<std::uint64_t> sender, std::uint64_t id,
                                            std::atomic<std::uint64_t>& returned) {
  // A local, not the parameter: the frame (and a parameter) lives on until the JoinHandle goes;
  // the channel must close for the consumer when the last producer returns.
  auto tx = std::move(sender);
  const TaskContext& ctx = co_await detail::CurrentContext{};
  std::uint64_t sent = 0;
  for (std::uint64_t i = 0; !ctx.token.stop_requested(); ++i) {
    auto r = co_await tx.send(id << 32 | i);
    if (!r) {
      EXPECT_EQ(*r.message(), id << 32 | i);
      returned.fetch_add(1);
      co_return sent;
    }
    ++sent;
  }
  co_return sent;  // stopped between sends (a send with room does not look at the token)
}

TEST(MpscBounded, CancelledProducersLoseAndDuplicateNothing) {
  auto rt = test::make_runtime("auto", 4);
  constexpr int kProducers = 6;
  auto [tx, rx] = mpsc::channel<std::uint64_t>(4);
  std::atomic<std::uint64_t> returned{0};
  std::vector<std::unique_ptr<Cancellable>> cancels;
  std::vector<JoinHandle<std::uint64_t>> producers;
  for (int p = 0; p < kProducers; ++p) {
    cancels.push_back(std::make_unique<Cancellable>(*rt));
    producers.push_back(
        rt->spawn_in(produce_until_cancelled(tx, p, returned), &cancels.back()->context));
  }
  { auto gone = std::move(tx); }
  auto consumer = rt->spawn([](mpsc::Receiver<std::uint64_t>& r) -> Task<std::uint64_t> {
    std::vector<std::uint64_t> next(kProducers, 0);
    std::uint64_t count = 0;
    while (auto m = co_await r.recv()) {
      const std::uint64_t id = *m >> 32, seq = *m & 0xffffffffu;
      EXPECT_EQ(seq, next[id]) << "a message lost or duplicated";
      next[id] = seq + 1;
      ++count;
    }
    co_return count;
  }(rx));
  std::uint64_t sent = 0;
  for (int p = 0; p < kProducers; ++p) {
    for (int spins = 0; spins < 2000; ++spins)
      std::this_thread::yield();  // let messages flow (progress, not synchronisation)
    cancels[p]->cancel();
    sent += producers[p].join_blocking();
  }
  EXPECT_EQ(consumer.join_blocking(), sent);
  EXPECT_LE(returned.load(), static_cast<std::uint64_t>(kProducers));
}

// ------------------------------------------------------------------------- mpsc unbounded

Task<void> produce_unbounded(mpsc::UnboundedSender<std::uint64_t> tx, std::uint64_t id,
                             std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(tx.send(id << 32 | i));
    if (i % 64 == 0) co_await yield();
  }
}

TEST(MpscUnbounded, KeepsOrderAcrossBlocks) {
  auto [tx, rx] = mpsc::unbounded_channel<std::string>();
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 1000; ++i)
      ASSERT_TRUE(tx.send(std::to_string(i)));
    EXPECT_EQ(rx.size(), 1000u);
    for (int i = 0; i < 1000; ++i)
      ASSERT_EQ(*rx.try_recv(), std::to_string(i));
  }
  EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_empty));
  { auto gone = std::move(tx); }
  EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_closed));
}

TEST(MpscUnbounded, ManyProducersAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  constexpr std::uint64_t kProducers = 8, kMessages = 5000;
  auto [tx, rx] = mpsc::unbounded_channel<std::uint64_t>();
  auto consumer = rt->spawn(consume(rx, kProducers, kMessages));
  for (std::uint64_t p = 0; p < kProducers; ++p)
    rt->spawn(produce_unbounded(tx, p, kMessages)).detach();
  { auto gone = std::move(tx); }
  EXPECT_EQ(consumer.join_blocking(), kProducers * kMessages);
}

TEST(MpscUnbounded, ReceiverWaitingAtShutdownIsCancelled) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = mpsc::unbounded_channel<int>();
  std::atomic<bool> parked{false};
  auto r =
      rt->spawn([](mpsc::UnboundedReceiver<int>& rx_in, std::atomic<bool>& p) -> Task<Result<int>> {
        p = true;
        co_return co_await rx_in.recv();
      }(rx, parked));
  ASSERT_TRUE(until([&] { return parked.load(); }));
  rt->request_stop();
  EXPECT_TRUE(canceled(r.join_blocking().error()));
}

// -------------------------------------------------------------------------------- oneshot

TEST(Oneshot, ValueSentBeforeOrAfterTheWait) {
  auto rt = test::make_runtime("auto");
  {
    auto [tx, rx] = oneshot::channel<std::unique_ptr<int>>();
    EXPECT_TRUE(std::move(tx).send(std::make_unique<int>(1)));
    auto v = rt->block_on(
        [](oneshot::Receiver<std::unique_ptr<int>>& r) -> Task<Result<std::unique_ptr<int>>> {
          co_return co_await r.recv();
        }(rx));
    ASSERT_TRUE(v);
    EXPECT_EQ(**v, 1);
    EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_closed));  // received once
  }
  {
    auto [tx, rx] = oneshot::channel<int>();
    std::atomic<bool> parked{false};
    auto r = rt->spawn([](oneshot::Receiver<int>& r_in, std::atomic<bool>& p) -> Task<Result<int>> {
      p = true;
      co_return co_await r_in.recv();
    }(rx, parked));
    ASSERT_TRUE(until([&] { return parked.load(); }));
    EXPECT_TRUE(std::move(tx).send(2));
    EXPECT_EQ(*r.join_blocking(), 2);
  }
}

TEST(Oneshot, DroppedSenderClosesAndClosedReceiverRefuses) {
  auto rt = test::make_runtime("auto");
  {
    auto [tx, rx] = oneshot::channel<int>();
    std::atomic<bool> parked{false};
    auto r = rt->spawn([](oneshot::Receiver<int>& r_in, std::atomic<bool>& p) -> Task<Result<int>> {
      p = true;
      co_return co_await r_in.recv();
    }(rx, parked));
    ASSERT_TRUE(until([&] { return parked.load(); }));
    { auto gone = std::move(tx); }
    EXPECT_TRUE(is(r.join_blocking().error(), Errc::channel_closed));
  }
  {
    auto [tx, rx] = oneshot::channel<std::string>();
    EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_empty));
    rx.close();
    EXPECT_TRUE(tx.is_closed());
    auto s = std::move(tx).send("kept");
    EXPECT_TRUE(is(s.error(), Errc::channel_closed));
    EXPECT_EQ(s.take_message(), "kept");
  }
}

// close() while the recv waits: the recv ends with channel_closed. Without the wake-up it
// could never end: the send that follows fails and spends the sender, so no drop wakes it.
TEST(Oneshot, CloseWakesAWaitingRecv) {
  auto rt = test::make_runtime("auto", 1);
  auto [tx, rx] = oneshot::channel<int>();
  std::atomic<bool> parked{false};
  auto r = rt->spawn([](oneshot::Receiver<int>& r_in, std::atomic<bool>& p) -> Task<Result<int>> {
    p = true;
    co_return co_await r_in.recv();
  }(rx, parked));
  ASSERT_TRUE(until([&] { return parked.load(); }));
  rt->block_on([](oneshot::Receiver<int>& r_in) -> Task<> {
    r_in.close();
    co_return;
  }(rx));
  auto s = std::move(tx).send(4);
  EXPECT_TRUE(is(s.error(), Errc::channel_closed));
  if (!until([&] { return r.done(); }, std::chrono::seconds(10))) {
    ADD_FAILURE() << "the waiting recv was never woken";
    rt->shutdown();  // cancels it, so that nothing outlives the channel
    return;
  }
  EXPECT_TRUE(is(r.join_blocking().error(), Errc::channel_closed));
}

TEST(Oneshot, CancelledRecvLeavesTheValueForTheNext) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = oneshot::channel<int>();
  Cancellable c(*rt);
  std::atomic<bool> parked{false};
  auto r = rt->spawn_in(
      [](oneshot::Receiver<int>& r_in, std::atomic<bool>& p) -> Task<Result<int>> {
        p = true;
        co_return co_await r_in.recv();
      }(rx, parked),
      &c.context);
  ASSERT_TRUE(until([&] { return parked.load(); }));
  c.cancel();
  EXPECT_TRUE(canceled(r.join_blocking().error()));
  EXPECT_TRUE(std::move(tx).send(3));
  EXPECT_EQ(*rx.try_recv(), 3);
}

TEST(Oneshot, ManyAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  constexpr int kPairs = 2000;
  std::vector<JoinHandle<Result<int>>> receivers;
  std::vector<oneshot::Receiver<int>> rxs;
  std::vector<oneshot::Sender<int>> txs;
  for (int i = 0; i < kPairs; ++i) {
    auto [tx, rx] = oneshot::channel<int>();
    txs.push_back(std::move(tx));
    rxs.push_back(std::move(rx));
  }
  for (int i = 0; i < kPairs; ++i)
    receivers.push_back(rt->spawn([](oneshot::Receiver<int>& r) -> Task<Result<int>> {
      co_return co_await r.recv();
    }(rxs[i])));
  for (int i = 0; i < kPairs; ++i)
    rt->spawn([](oneshot::Sender<int> tx, int v) -> Task<void> {
        EXPECT_TRUE(std::move(tx).send(v));
        co_return;
      }(std::move(txs[i]), i))
        .detach();
  for (int i = 0; i < kPairs; ++i)
    EXPECT_EQ(*receivers[i].join_blocking(), i);
}

// ------------------------------------------------------------------------------ broadcast

TEST(Broadcast, EveryReceiverGetsEveryMessageInOrder) {
  auto [tx, rx1] = broadcast::channel<int>(16);
  auto rx2 = tx.subscribe();
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(tx.send(i));
  auto rx3 = tx.subscribe();  // sees only what comes after
  ASSERT_TRUE(tx.send(10));
  for (int i = 0; i <= 10; ++i) {
    EXPECT_EQ(*rx1.try_recv(), i);
    EXPECT_EQ(*rx2.try_recv(), i);
  }
  EXPECT_EQ(*rx3.try_recv(), 10);
  EXPECT_TRUE(is(rx1.try_recv().error(), Errc::channel_empty));
  EXPECT_EQ(tx.receiver_count(), 3u);
}

TEST(Broadcast, LaggingReceiverIsToldHowManyItMissed) {
  auto [tx, rx] = broadcast::channel<int>(4);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(tx.send(i));
  auto r = rx.try_recv();
  EXPECT_TRUE(is(r.error(), Errc::channel_lagged));
  EXPECT_EQ(rx.missed(), 6u);
  for (int i = 6; i < 10; ++i)
    EXPECT_EQ(*rx.try_recv(), i);
}

TEST(Broadcast, WaitingReceiversAreHandedCopiesAndClosedAfterTheLastSender) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx1] = broadcast::channel<std::string>(4);
  auto rx2 = tx.subscribe();
  std::atomic<int> parked{0};
  auto task = [](broadcast::Receiver<std::string>& r,
                 std::atomic<int>& p) -> Task<std::vector<std::string>> {
    std::vector<std::string> got;
    p.fetch_add(1);
    for (;;) {
      auto m = co_await r.recv();
      if (!m) {
        EXPECT_TRUE(is(m.error(), Errc::channel_closed));
        co_return got;
      }
      got.push_back(*m);
    }
  };
  auto a = rt->spawn(task(rx1, parked));
  auto b = rt->spawn(task(rx2, parked));
  ASSERT_TRUE(until([&] { return parked.load() == 2; }));
  // Sends now race with the receivers: capacity 4 holds all three, so nothing is lost.
  auto tx2 = tx;
  ASSERT_TRUE(tx.send("x"));
  ASSERT_TRUE(tx2.send("y"));
  ASSERT_TRUE(tx.send("z"));
  { auto gone = std::move(tx); }
  { auto gone = std::move(tx2); }
  const std::vector<std::string> want{"x", "y", "z"};
  EXPECT_EQ(a.join_blocking(), want);
  EXPECT_EQ(b.join_blocking(), want);
}

// A message whose copy can fail (T's copy constructor throws: std::bad_alloc in a string, say).
struct FragileCopy {
  int v = 0;
  static inline std::atomic<int> copies_left{1 << 30};
  explicit FragileCopy(int x) : v(x) {}
  FragileCopy(const FragileCopy& o) : v(o.v) {
    if (copies_left.fetch_sub(1) <= 0) throw std::runtime_error("copy failed");
  }
  FragileCopy(FragileCopy&&) noexcept = default;
  FragileCopy& operator=(const FragileCopy&) = default;
  FragileCopy& operator=(FragileCopy&&) noexcept = default;
};

// A send whose copy for a waiting receiver throws changes nothing: the exception reaches the
// sender, the receiver still waits (it is not dropped from the list, never to be woken) and
// the next send reaches it.
TEST(Broadcast, ASendWhoseCopyThrowsLeavesTheWaitingReceiverWaiting) {
  auto rt = test::make_runtime("auto", 1);
  auto [tx, rx] = broadcast::channel<FragileCopy>(4);
  std::atomic<bool> parked{false};
  auto r = rt->spawn(
      [](broadcast::Receiver<FragileCopy>& rx_in, std::atomic<bool>& p) -> Task<Result<int>> {
        p = true;
        auto m = co_await rx_in.recv();
        if (!m) co_return m.error();
        co_return m->v;
      }(rx, parked));
  ASSERT_TRUE(until([&] { return parked.load(); }));
  // On the one worker, after the receiver has parked.
  const bool threw = rt->block_on([](broadcast::Sender<FragileCopy>& tx_in) -> Task<bool> {
    FragileCopy::copies_left = 0;
    bool t = false;
    try {
      (void)tx_in.send(FragileCopy(1));
    } catch (const std::runtime_error&) {
      t = true;
    }
    FragileCopy::copies_left = 1 << 30;
    co_return t;
  }(tx));
  EXPECT_TRUE(threw);
  EXPECT_FALSE(r.done());
  EXPECT_TRUE(tx.send(FragileCopy(2)));
  if (!until([&] { return r.done(); }, std::chrono::seconds(10))) {
    ADD_FAILURE() << "the waiting receiver was lost by the failed send";
    rt->shutdown();
    return;
  }
  auto got = r.join_blocking();
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, 2);
  EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_empty));
}

TEST(Broadcast, SendWithoutReceiversReturnsTheMessage) {
  auto [tx, rx] = broadcast::channel<std::string>(2);
  { auto gone = std::move(rx); }
  auto r = tx.send("nobody");
  EXPECT_TRUE(is(r.error(), Errc::channel_closed));
  EXPECT_EQ(r.take_message(), "nobody");
}

TEST(Broadcast, CancelledRecvReadsOnFromWhereItWas) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = broadcast::channel<int>(4);
  Cancellable c(*rt);
  std::atomic<bool> parked{false};
  auto r = rt->spawn_in(
      [](broadcast::Receiver<int>& r_in, std::atomic<bool>& p) -> Task<Result<int>> {
        p = true;
        co_return co_await r_in.recv();
      }(rx, parked),
      &c.context);
  ASSERT_TRUE(until([&] { return parked.load(); }));
  c.cancel();
  auto got = r.join_blocking();
  if (got) {
    FAIL() << "nothing was sent";
  }
  EXPECT_TRUE(canceled(got.error()));
  ASSERT_TRUE(tx.send(5));
  EXPECT_EQ(*rx.try_recv(), 5);
}

TEST(Broadcast, ManyProducersAndReceiversAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  constexpr int kProducers = 4, kReceivers = 4, kMessages = 3000;
  auto [tx, first] = broadcast::channel<int>(64);
  std::vector<broadcast::Receiver<int>> rxs;
  rxs.push_back(std::move(first));
  for (int i = 1; i < kReceivers; ++i)
    rxs.push_back(tx.subscribe());
  std::vector<JoinHandle<std::uint64_t>> receivers;
  for (auto& rx : rxs)
    receivers.push_back(rt->spawn([](broadcast::Receiver<int>& r) -> Task<std::uint64_t> {
      std::uint64_t seen = 0;  // received + reported missed
      for (;;) {
        auto m = co_await r.recv();
        if (m) {
          ++seen;
        } else if (is(m.error(), Errc::channel_lagged)) {
          seen += r.missed();
        } else {
          EXPECT_TRUE(is(m.error(), Errc::channel_closed));
          co_return seen;
        }
      }
    }(rx)));
  for (int p = 0; p < kProducers; ++p)
    rt->spawn([](broadcast::Sender<int> s, int n) -> Task<void> {
        for (int i = 0; i < n; ++i) {
          EXPECT_TRUE(s.send(i));
          if (i % 16 == 0) co_await yield();
        }
      }(tx, kMessages))
        .detach();
  { auto gone = std::move(tx); }
  for (auto& r : receivers)
    EXPECT_EQ(r.join_blocking(), std::uint64_t{kProducers} * kMessages);
}

// ---------------------------------------------------------------------------------- watch

TEST(Watch, ChangedSeesTheLatestValue) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = watch::channel<std::string>("a");
  EXPECT_EQ(rx.borrow(), "a");
  EXPECT_FALSE(rx.has_changed());
  ASSERT_TRUE(tx.send("b"));
  ASSERT_TRUE(tx.send("c"));  // "b" is skipped: latest value only
  EXPECT_TRUE(rx.has_changed());
  auto r = rt->block_on([](watch::Receiver<std::string>& r_in) -> Task<std::string> {
    EXPECT_TRUE(co_await r_in.changed());
    co_return r_in.borrow();
  }(rx));
  EXPECT_EQ(r, "c");
  EXPECT_FALSE(rx.has_changed());
}

TEST(Watch, WaitersWakeOnSendAndCloseWhenTheSenderGoes) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = watch::channel<int>(0);
  auto rx2 = rx;
  std::atomic<int> parked{0};
  auto waiter = [](watch::Receiver<int>& r, std::atomic<int>& p) -> Task<std::vector<int>> {
    std::vector<int> got;
    p.fetch_add(1);
    while (co_await r.changed())
      got.push_back(r.borrow());
    co_return got;
  };
  auto a = rt->spawn(waiter(rx, parked));
  auto b = rt->spawn(waiter(rx2, parked));
  ASSERT_TRUE(until([&] { return parked.load() == 2; }));
  ASSERT_TRUE(tx.send(1));
  { auto gone = std::move(tx); }
  // Each saw 1 (at most once: changes are not queued), then channel_closed.
  for (auto* h : {&a, &b}) {
    auto got = h->join_blocking();
    EXPECT_LE(got.size(), 1u);
    for (int v : got)
      EXPECT_EQ(v, 1);
  }
  EXPECT_EQ(rx.borrow(), 1);
}

TEST(Watch, CancelledChangedKeepsTheSeenVersion) {
  auto rt = test::make_runtime("auto");
  auto [tx, rx] = watch::channel<int>(0);
  Cancellable c(*rt);
  std::atomic<bool> parked{false};
  auto r = rt->spawn_in(
      [](watch::Receiver<int>& r_in, std::atomic<bool>& p) -> Task<Result<void>> {
        p = true;
        co_return co_await r_in.changed();
      }(rx, parked),
      &c.context);
  ASSERT_TRUE(until([&] { return parked.load(); }));
  c.cancel();
  EXPECT_TRUE(canceled(r.join_blocking().error()));
  EXPECT_FALSE(rx.has_changed());
  ASSERT_TRUE(tx.send(4));
  EXPECT_TRUE(rx.has_changed());
}

TEST(Watch, ReceiversSeeMonotonicValuesAcrossWorkers) {
  auto rt = test::make_runtime("auto", 4);
  constexpr int kReceivers = 6, kValues = 5000;
  auto [tx, first] = watch::channel<int>(0);
  std::vector<watch::Receiver<int>> rxs(kReceivers, first);
  std::vector<JoinHandle<int>> readers;
  for (auto& rx : rxs)
    readers.push_back(rt->spawn([](watch::Receiver<int>& r) -> Task<int> {
      int last = 0;
      while (co_await r.changed()) {
        const int v = r.borrow();
        EXPECT_GE(v, last);
        last = v;
      }
      co_return r.borrow();
    }(rx)));
  rt->block_on([](watch::Sender<int> s, int n) -> Task<void> {
    for (int i = 1; i <= n; ++i) {
      EXPECT_TRUE(s.send(i));
      if (i % 32 == 0) co_await yield();
    }
  }(std::move(tx), kValues));
  for (auto& r : readers)
    EXPECT_EQ(r.join_blocking(), kValues);
}

// ----------------------------------------------- cancellation racing with the hand-over

// Each round, a waiting receiver is cancelled (from another thread) as the value is sent: the
// value ends up exactly once, in the waiter's result or in the channel for the next read.
template <class Round>
void race_rounds(Round round) {
  auto rt = test::make_runtime("auto", 4);
  for (int i = 0; i < 200 && !::testing::Test::HasFatalFailure(); ++i)
    round(*rt, i);
}

TEST(Oneshot, CancellationRacingTheSendLosesAndDuplicatesNothing) {
  race_rounds([](Runtime& rt, int i) {
    auto [tx, rx] = oneshot::channel<int>();
    Cancellable c(rt);
    std::atomic<bool> parked{false};
    auto r = rt.spawn_in(
        [](oneshot::Receiver<int>& rx_in, std::atomic<bool>& p) -> Task<Result<int>> {
          p = true;
          co_return co_await rx_in.recv();
        }(rx, parked),
        &c.context);
    ASSERT_TRUE(until([&] { return parked.load(); }));
    std::thread canceller([&] { c.cancel(); });
    EXPECT_TRUE(std::move(tx).send(i));
    canceller.join();
    auto got = r.join_blocking();
    if (got) {
      EXPECT_EQ(*got, i);
      EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_closed));
    } else {
      EXPECT_TRUE(canceled(got.error()));
      auto left = rx.try_recv();
      ASSERT_TRUE(left) << "the value was lost";
      EXPECT_EQ(*left, i);
    }
  });
}

TEST(Broadcast, CancellationRacingTheSendLosesAndDuplicatesNothing) {
  race_rounds([](Runtime& rt, int i) {
    auto [tx, rx] = broadcast::channel<int>(4);
    Cancellable c(rt);
    std::atomic<bool> parked{false};
    auto r = rt.spawn_in(
        [](broadcast::Receiver<int>& rx_in, std::atomic<bool>& p) -> Task<Result<int>> {
          p = true;
          co_return co_await rx_in.recv();
        }(rx, parked),
        &c.context);
    ASSERT_TRUE(until([&] { return parked.load(); }));
    std::thread canceller([&] { c.cancel(); });
    EXPECT_TRUE(tx.send(i));
    canceller.join();
    auto got = r.join_blocking();
    if (got) {
      EXPECT_EQ(*got, i);
      EXPECT_TRUE(is(rx.try_recv().error(), Errc::channel_empty)) << "received twice";
    } else {
      EXPECT_TRUE(canceled(got.error()));
      auto left = rx.try_recv();
      ASSERT_TRUE(left) << "the message was lost";
      EXPECT_EQ(*left, i);
    }
  });
}

TEST(Watch, CancellationRacingTheSendLosesNoChange) {
  race_rounds([](Runtime& rt, int i) {
    auto [tx, rx] = watch::channel<int>(-1);
    Cancellable c(rt);
    std::atomic<bool> parked{false};
    auto r = rt.spawn_in(
        [](watch::Receiver<int>& rx_in, std::atomic<bool>& p) -> Task<Result<void>> {
          p = true;
          co_return co_await rx_in.changed();
        }(rx, parked),
        &c.context);
    ASSERT_TRUE(until([&] { return parked.load(); }));
    std::thread canceller([&] { c.cancel(); });
    EXPECT_TRUE(tx.send(i));
    canceller.join();
    auto got = r.join_blocking();
    if (got) {
      EXPECT_FALSE(rx.has_changed());  // seen
    } else {
      EXPECT_TRUE(canceled(got.error()));
      EXPECT_TRUE(rx.has_changed()) << "the change was marked seen by a cancelled wait";
    }
    EXPECT_EQ(rx.borrow(), i);
  });
}

}  // namespace
}  // namespace arbor
