// use_task / cancel_with at the edges (review of the Asio interop): a handler that runs inside
// the initiating call, and a stop that arrives while the operation is being started.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>

#include "arbor/asio/asio.hpp"
#include "runtime/runtime_support.hpp"

namespace {

using namespace std::chrono_literals;
namespace net = boost::asio;

std::unique_ptr<arbor::Runtime> runtime_with(int workers) {
  arbor::RuntimeOptions o;
  o.scheduler.workers = workers;
  return std::move(arbor::Runtime::create(o).value());
}

arbor::Task<int> dispatch_many(arbor::asio::Context& ctx, int times) {
  int done = 0;
  for (int i = 0; i < times; ++i) {
    auto r = co_await net::dispatch(ctx.get_executor(), arbor::asio::use_task);
    if (r) ++done;
  }
  co_return done;
}

// dispatch() on a worker calls the handler inside the initiating call. Before the fix the
// handler resumed the task right there, nested inside await_suspend, so each await in the
// loop went one resume deeper: the stack overflowed (SIGSEGV) long before a million.
TEST(AsioUseTaskEdges, AHandlerCalledInsideItsInitiationDoesNotNestTheResume) {
  auto rt = runtime_with(1);
  arbor::asio::Context ctx(*rt);
  EXPECT_EQ(rt->block_on(dispatch_many(ctx, 1'000'000)), 1'000'000);
  ctx.wait_idle();
}

// An I/O object of the test's own: a wait that only cancel() completes. Its initiation asks
// the awaiting task to stop, then gives a posted cancel time to run before the wait becomes
// pending, the window a real initiation (a Stream's read, a timer's wait) has on another
// thread. cancel() records whether it ran while the initiation was still going on.
class Gate {
 public:
  Gate(arbor::asio::Context& ctx, std::stop_source& stop) : ctx_(&ctx), stop_(&stop) {}
  arbor::asio::Context::executor_type get_executor() const { return ctx_->get_executor(); }

  void cancel() {
    std::lock_guard lock(mutex_);
    cancels.fetch_add(1);
    if (initiating_) cancelled_during_initiation.store(true);
    if (pending_) net::post(*ctx_, [p = std::exchange(pending_, nullptr)] { p(); });
  }

  template <class Token>
  auto async_wait(Token&& token) {
    return net::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler) {
          {
            std::lock_guard lock(mutex_);
            initiating_ = true;
          }
          stop_->request_stop();
          for (auto until = std::chrono::steady_clock::now() + 200ms;
               cancels.load() == 0 && std::chrono::steady_clock::now() < until;)
            std::this_thread::sleep_for(1ms);
          auto h = std::make_shared<decltype(handler)>(std::move(handler));
          std::lock_guard lock(mutex_);
          initiating_ = false;
          pending_ = [h] { (*h)(net::error::operation_aborted); };
        },
        token);
  }

  std::atomic<int> cancels{0};
  std::atomic<bool> cancelled_during_initiation{false};

 private:
  arbor::asio::Context* ctx_;
  std::stop_source* stop_;
  std::mutex mutex_;
  bool initiating_ = false;
  std::function<void()> pending_;
};

arbor::Task<arbor::Result<void>> wait_gate(Gate& gate, std::promise<arbor::Result<void>>& out) {
  auto r = co_await gate.async_wait(arbor::asio::cancel_with(gate));
  out.set_value(r);
  co_return r;
}

// A stop that arrives while the operation is being started: before the fix, the posted
// cancel ran at once on another worker, concurrently with the initiation (an Asio object
// used from two threads) and before the wait was pending, so it cancelled nothing and the
// task waited forever.
TEST(AsioUseTaskEdges, AStopDuringTheInitiationCancelsTheOperationOnceItIsPending) {
  auto rt = runtime_with(2);
  arbor::asio::Context ctx(*rt);
  std::stop_source source;
  Gate gate(ctx, source);
  arbor::TaskContext tc{rt.get(), source.get_token(), false};
  std::promise<arbor::Result<void>> out;
  auto result = out.get_future();
  auto handle = rt->spawn_in(wait_gate(gate, out), &tc);
  const bool ended = result.wait_for(10s) == std::future_status::ready;
  EXPECT_TRUE(ended) << "the wait was never cancelled";
  EXPECT_FALSE(gate.cancelled_during_initiation.load());
  if (!ended) gate.cancel();  // let the task end, so the test does
  auto r = handle.join_blocking();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), std::errc::operation_canceled) << r.error().message();
  EXPECT_EQ(gate.cancels.load(), ended ? 1 : 2);
  ctx.wait_idle();
}

}  // namespace
