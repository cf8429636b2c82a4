// perf/roundtrip on Boost.Asio: the same program (roundtrip_common.hpp) on asio::thread_pool
// with the same thread count. post() goes through the pool's shared queue and wakes an idle
// thread; defer() marks a continuation, which Asio keeps on the posting thread's private queue
// — Asio's counterpart of arbor's prefer-local submit. Handlers are small lambdas, which Asio
// recycles through its per-thread handler memory, so the loop does not hit malloc either.
#include <boost/asio/defer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <future>

#include "../roundtrip_common.hpp"

namespace asio = boost::asio;

namespace {

struct RoundTrip {
  RoundTrip(const roundtrip::Config& c, asio::thread_pool& p) : config(c), client(c), pool(p) {}
  const roundtrip::Config& config;
  roundtrip::Client client;
  asio::thread_pool& pool;
  std::promise<void> finished;

  void request() {
    asio::post(pool, [this] { server(); });
  }
  void server() {
    asio::post(pool, [this] { reply(); });
    if (config.housekeeping) roundtrip::busy_for(config.tail_ns);
  }
  void reply() {
    asio::defer(pool, [this] { continuation(); });
  }
  void continuation() {
    if (!client.on_reply()) return finished.set_value();
    request();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const roundtrip::Config config = roundtrip::parse(argc, argv);
  asio::thread_pool pool(static_cast<std::size_t>(config.threads));
  RoundTrip rt(config, pool);
  rt.client.set_runtime("asio ");
  auto done = rt.finished.get_future();
  rt.client.start();
  rt.request();
  done.wait();
  rt.client.report();
  pool.join();
  return 0;
}
