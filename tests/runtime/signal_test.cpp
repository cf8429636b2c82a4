// Signals: every listener that exists when a signal arrives gets it, once (bursts coalesce), in
// any runtime; listeners made later do not; recv() is cancelled by the runtime stopping; what
// cannot be listened for is refused; the handler and the descriptors go with the last listener.
//
// POSIX: raise() runs the handler on the calling thread before it returns, so "delivered" is
// known without waiting; kill() to the process lets the kernel pick a thread. SIGUSR1 and
// SIGUSR2 only, and always with a listener alive: without one they would end the test binary.
// Windows (under wine, which cannot be relied on to deliver console events to a test): the
// console control handler's own function, detail::deliver_console_event, called directly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include "../sched/test_support.hpp"
#include "arbor/arbor.hpp"
#include "runtime_support.hpp"

#if !defined(_WIN32)
#include <dirent.h>
#endif

namespace arbor {
#if defined(_WIN32)
namespace detail {
int deliver_console_event(unsigned long event) noexcept;
}
#endif

namespace {

class SignalTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    rt_ = test::make_runtime(GetParam());
    ASSERT_TRUE(rt_);
  }
  template <class T>
  T run(Task<T> task) {
    return rt_->block_on(std::move(task));
  }
  std::unique_ptr<Runtime> rt_;
};

Task<Result<int>> recv_from(SignalListener& listener) {
  co_return co_await listener.recv();
}

// A recv() started on a worker; `started` counts down just before it awaits.
JoinHandle<Result<int>> spawn_recv(Runtime& rt, SignalListener& listener,
                                   sched::test::Countdown& started) {
  return rt.spawn([](SignalListener& l, sched::test::Countdown& s) -> Task<Result<int>> {
    s.count_down();
    co_return co_await l.recv();
  }(listener, started));
}

#if !defined(_WIN32)

// Descriptors open in this process now.
int open_descriptors() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr)
      ++n;
    ::closedir(d);
  }
  return n;
}

// The descriptor count once it has come down to `want`, or after 10 s. On io_uring a socket's
// descriptor may outlive close() by a moment: the kernel drops it when the ring lets go of the
// requests that held it (its receive), not at the close call.
int descriptors_settled_at(int want) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int n = open_descriptors();
  while (n != want && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling a condition
    n = open_descriptors();
  }
  return n;
}

TEST_P(SignalTest, RaiseFromAnotherThreadReachesAPendingRecv) {
  auto listener = signal(*rt_, SIGUSR1);
  ASSERT_TRUE(listener) << listener.error().message();
  sched::test::Countdown started(1);
  auto received = spawn_recv(*rt_, *listener, started);
  ASSERT_TRUE(started.wait());
  std::thread([] { ::raise(SIGUSR1); }).join();
  auto r = received.join_blocking();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, SIGUSR1);
}

TEST_P(SignalTest, KillToTheProcessReachesTheListener) {
  auto listener = signal(*rt_, {SIGUSR1, SIGUSR2});
  ASSERT_TRUE(listener);
  ASSERT_EQ(::kill(::getpid(), SIGUSR2), 0);
  auto r = run(recv_from(*listener));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, SIGUSR2);
}

TEST_P(SignalTest, EveryListenerSeesEachDelivery) {
  auto first = signal(*rt_, SIGUSR1);
  auto second = signal(*rt_, SIGUSR1);
  auto both = signal(*rt_, {SIGUSR2, SIGUSR1});
  ASSERT_TRUE(first && second && both);
  for (int round = 0; round < 3; ++round) {
    ::raise(SIGUSR1);
    for (SignalListener* l : {&*first, &*second, &*both}) {
      auto r = run(recv_from(*l));
      ASSERT_TRUE(r) << r.error().message();
      EXPECT_EQ(*r, SIGUSR1);
    }
  }
}

TEST_P(SignalTest, AListenerMadeAfterADeliveryDoesNotSeeIt) {
  auto early = signal(*rt_, SIGUSR1);
  ASSERT_TRUE(early);
  ::raise(SIGUSR1);  // delivered when raise returns
  auto late = signal(*rt_, {SIGUSR1, SIGUSR2});
  ASSERT_TRUE(late);
  ::raise(SIGUSR2);
  // Deliveries come out in order: had `late` seen the SIGUSR1, it would come first.
  auto r = run(recv_from(*late));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, SIGUSR2);
  auto e = run(recv_from(*early));
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, SIGUSR1);
}

TEST_P(SignalTest, ABurstBeforeRecvCoalescesIntoOneDelivery) {
  auto listener = signal(*rt_, {SIGUSR1, SIGUSR2});
  ASSERT_TRUE(listener);
  for (int i = 0; i < 1000; ++i)
    ::raise(SIGUSR1);
  ::raise(SIGUSR2);
  auto r = run(recv_from(*listener));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, SIGUSR1);
  // The burst was one delivery: the next is the SIGUSR2 (the socket never filled up and
  // dropped it), and then a SIGUSR1 raised after the first recv() returned.
  ::raise(SIGUSR1);
  r = run(recv_from(*listener));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, SIGUSR2);
  r = run(recv_from(*listener));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, SIGUSR1);
}

TEST_P(SignalTest, ListenersInTwoRuntimesBothSeeIt) {
  auto other = test::make_runtime(GetParam());
  ASSERT_TRUE(other);
  auto here = signal(*rt_, SIGUSR1);
  auto there = signal(*other, SIGUSR1);
  ASSERT_TRUE(here && there);
  sched::test::Countdown started(2);
  auto a = spawn_recv(*rt_, *here, started);
  auto b = spawn_recv(*other, *there, started);
  ASSERT_TRUE(started.wait());
  ASSERT_EQ(::kill(::getpid(), SIGUSR1), 0);
  EXPECT_EQ(a.join_blocking().value(), SIGUSR1);
  EXPECT_EQ(b.join_blocking().value(), SIGUSR1);
}

TEST_P(SignalTest, HandlerAndDescriptorsGoWithTheLastListener) {
  // SIGUSR2 ignored before: the disposition the last listener puts back.
  struct sigaction ignore {
  }, before{}, during{}, after{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(::sigaction(SIGUSR2, &ignore, &before), 0);
  // One listener made and dropped first: an engine may open what it needs on its first attach.
  ASSERT_TRUE(signal(*rt_, SIGUSR2));
  const int descriptors = open_descriptors();
  {
    std::vector<SignalListener> listeners;
    for (int i = 0; i < 3; ++i)
      listeners.push_back(signal(*rt_, SIGUSR2).value());
    ::sigaction(SIGUSR2, nullptr, &during);
    EXPECT_NE(during.sa_handler, SIG_IGN);
    // A socket pair each, one end attached; over libkqueue (Linux) the kqueue engine also
    // watches writes on a duplicate of each attached fd (docs/platforms.md, "kqueue on Linux").
#if defined(__linux__)
    const int duplicates = GetParam().starts_with("kqueue") ? 3 : 0;
#else
    const int duplicates = 0;
#endif
    EXPECT_EQ(open_descriptors(), descriptors + 6 + duplicates);
    ::raise(SIGUSR2);
    for (auto& l : listeners)
      EXPECT_EQ(run(recv_from(l)).value(), SIGUSR2);
    listeners.pop_back();  // not the last: the handler stays
    ::sigaction(SIGUSR2, nullptr, &during);
    EXPECT_NE(during.sa_handler, SIG_IGN);
  }
  EXPECT_EQ(descriptors_settled_at(descriptors), descriptors);
  ::sigaction(SIGUSR2, nullptr, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
  ::sigaction(SIGUSR2, &before, nullptr);
}

// Listeners made and dropped while another thread keeps signalling: the handler must never
// send on a descriptor being closed (AddressSanitizer, ThreadSanitizer), and the long-lived
// listener still gets its signal.
TEST_P(SignalTest, ListenersComeAndGoWhileSignalsArrive) {
  auto steady = signal(*rt_, SIGUSR1);  // keeps the handler installed throughout
  ASSERT_TRUE(steady);
  std::atomic<bool> done{false};
  std::thread sender([&] {
    do  // at least once: the loop below may be over before this thread runs
      ::kill(::getpid(), SIGUSR1);
    while (!done.load());
  });
  for (int i = 0; i < 300; ++i) {
    auto l = signal(*rt_, {SIGUSR1, SIGUSR2});
    ASSERT_TRUE(l) << l.error().message();
  }
  done = true;
  sender.join();
  auto r = run(recv_from(*steady));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, SIGUSR1);
}

TEST_P(SignalTest, WhatCannotBeListenedForIsRefused) {
  for (int s : {SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGILL, SIGFPE, 0, -1, NSIG, 1000}) {
    auto l = signal(*rt_, s);
    EXPECT_EQ(l.error(), std::errc::invalid_argument) << s;
  }
  auto mixed = signal(*rt_, {SIGUSR1, SIGKILL});
  EXPECT_EQ(mixed.error(), std::errc::invalid_argument);
  EXPECT_EQ(SignalListener::listen(*rt_, {}).error(), std::errc::invalid_argument);
}

#else  // Windows

TEST_P(SignalTest, CtrlCAndCtrlBreakReachCtrlCListeners) {
  auto a = ctrl_c(*rt_);
  auto b = ctrl_c(*rt_);
  auto both = signal(*rt_, {SIGINT, SIGBREAK});
  ASSERT_TRUE(a && b && both);
  sched::test::Countdown started(1);
  auto received = spawn_recv(*rt_, *a, started);
  ASSERT_TRUE(started.wait());
  int taken = 0;
  std::thread([&] { taken = detail::deliver_console_event(CTRL_C_EVENT); }).join();
  EXPECT_TRUE(taken);
  EXPECT_EQ(received.join_blocking().value(), SIGINT);
  EXPECT_EQ(run(recv_from(*b)).value(), SIGINT);
  EXPECT_EQ(run(recv_from(*both)).value(), SIGINT);
  // Ctrl-Break: SIGINT to a Ctrl-C listener, SIGBREAK to one that listens for it.
  EXPECT_TRUE(detail::deliver_console_event(CTRL_BREAK_EVENT));
  EXPECT_EQ(run(recv_from(*a)).value(), SIGINT);
  EXPECT_EQ(run(recv_from(*both)).value(), SIGBREAK);
}

TEST_P(SignalTest, AnEventNobodyListensForGoesToTheNextHandler) {
  auto only_break = signal(*rt_, SIGBREAK);
  ASSERT_TRUE(only_break);
  EXPECT_FALSE(detail::deliver_console_event(CTRL_C_EVENT));
  EXPECT_FALSE(detail::deliver_console_event(CTRL_CLOSE_EVENT));
}

// The console closing: the handler returns (letting Windows end the process) only once the
// SIGTERM listener is gone, i.e. once the program's stop has run its course.
TEST_P(SignalTest, ConsoleCloseWaitsForTheTerminateListenerToGo) {
  auto terminate = signal(*rt_, SIGTERM);
  ASSERT_TRUE(terminate);
  std::atomic<int> returned{-1};
  std::thread handler([&] { returned = detail::deliver_console_event(CTRL_CLOSE_EVENT); });
  EXPECT_EQ(run(recv_from(*terminate)).value(), SIGTERM);
  EXPECT_EQ(returned.load(), -1);  // cannot have returned: the listener is still here
  *terminate = SignalListener();   // the stop is done
  handler.join();
  EXPECT_EQ(returned.load(), TRUE);
}

TEST_P(SignalTest, WhatCannotBeListenedForIsRefused) {
  for (int s : {SIGSEGV, SIGFPE, SIGILL, SIGABRT, 0, -1, 1000})
    EXPECT_EQ(signal(*rt_, s).error(), std::errc::invalid_argument) << s;
  EXPECT_EQ(SignalListener::listen(*rt_, {}).error(), std::errc::invalid_argument);
}

#endif

TEST_P(SignalTest, StopCancelsAPendingRecv) {
  auto listener = ctrl_c(*rt_);
  ASSERT_TRUE(listener);
  sched::test::Countdown started(1);
  auto received = spawn_recv(*rt_, *listener, started);
  ASSERT_TRUE(started.wait());
  rt_->request_stop();
  EXPECT_EQ(received.join_blocking().error(), std::errc::operation_canceled);
  // The examples' order: the runtime shut down, then its listener goes.
  rt_->shutdown();
  *listener = SignalListener();
}

TEST_P(SignalTest, AMovedFromListenerRefusesRecv) {
  auto listener = ctrl_c(*rt_);
  ASSERT_TRUE(listener);
  SignalListener moved = std::move(*listener);
  EXPECT_EQ(run(recv_from(*listener)).error(), std::errc::bad_file_descriptor);
}

INSTANTIATE_TEST_SUITE_P(Engines, SignalTest, ::testing::ValuesIn(test::engine_variants()),
                         test::engine_name);

}  // namespace
}  // namespace arbor
