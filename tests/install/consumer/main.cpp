// A downstream program using the installed arbor: runs a task that sleeps and returns 42; with
// arbor::asio installed, the sleep is an Asio timer awaited through arbor::asio::use_task.
#include <arbor/arbor.hpp>
#include <chrono>
#include <cstdio>
#if defined(CONSUMER_ASIO)
#include <arbor/asio/asio.hpp>
#include <boost/asio/steady_timer.hpp>
#endif

namespace {
#if defined(CONSUMER_ASIO)
arbor::Task<int> answer(arbor::asio::Context& ctx) {
  boost::asio::steady_timer timer(ctx, std::chrono::milliseconds(1));
  auto slept = co_await timer.async_wait(arbor::asio::use_task);
  co_return slept ? 42 : 1;
}
#else
arbor::Task<int> answer() {
  auto slept = co_await arbor::sleep_for(std::chrono::milliseconds(1));
  co_return slept ? 42 : 1;
}
#endif
}  // namespace

int main() {
  arbor::Runtime rt;
#if defined(CONSUMER_ASIO)
  arbor::asio::Context ctx(rt);
  const int value = rt.block_on(answer(ctx));
#else
  const int value = rt.block_on(answer());
#endif
  std::printf("%d\n", value);
  return value == 42 ? 0 : 1;
}
