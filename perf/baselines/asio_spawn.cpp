// perf/spawn on Boost.Asio: see spawn_common.hpp. asio::post of a small lambda to a
// thread_pool with the same thread count, from outside and from inside the pool.
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <future>

#include "../spawn_common.hpp"

namespace asio = boost::asio;

namespace {
struct Shared {
  asio::thread_pool* pool;
  std::atomic<std::int64_t> left;
  std::promise<void> done;
  std::int64_t count;
  bool inside;
};

void run(Shared& s, std::int64_t i) {
  if (s.inside) {
    for (std::int64_t child = 2 * i + 1; child <= 2 * i + 2 && child < s.count; ++child)
      asio::post(*s.pool, [&s, child] { run(s, child); });
  }
  if (s.left.fetch_sub(1, std::memory_order_acq_rel) == 1) s.done.set_value();
}
}  // namespace

int main(int argc, char** argv) {
  const spawn_bench::Config c = spawn_bench::parse(argc, argv);
  asio::thread_pool pool(static_cast<std::size_t>(c.threads));
  Shared shared{&pool, {c.items}, {}, c.items, c.inside};
  auto done = shared.done.get_future();
  const auto start = std::chrono::steady_clock::now();
  if (c.inside) {
    asio::post(pool, [&shared] { run(shared, 0); });
  } else {
    for (std::int64_t i = 0; i < c.items; ++i)
      asio::post(pool, [&shared, i] { run(shared, i); });
  }
  done.wait();
  spawn_bench::report("asio ", c, std::chrono::steady_clock::now() - start);
  pool.join();
  return 0;
}
