// perf/roundtrip on arbor: see roundtrip_common.hpp for the program and its modes.
//
// The three steps are intrusive work items allocated once, so the measured loop allocates
// nothing: client -> (global) server -> (global) reply -> (prefer local) client.
#include <cstdio>
#include <cstdlib>

#include "arbor/sched/scheduler.hpp"
#include "arbor/sync/thread_blocker.hpp"
#include "roundtrip_common.hpp"

namespace {

using arbor::sched::Disposition;
using arbor::sched::Scheduler;
using arbor::sched::WorkItem;

struct RoundTrip {
  explicit RoundTrip(const roundtrip::Config& c) : config(c), client(c) {}

  const roundtrip::Config& config;
  roundtrip::Client client;
  arbor::sync::ThreadBlocker finished;

  struct Step : WorkItem {
    Step(RoundTrip* o, Fn f) : WorkItem(f), owner(o) {}
    RoundTrip* owner;
  };
  // The client's continuation: record the reply, then send the next request.
  Step continuation{this, [](WorkItem* self, Disposition d) noexcept {
                      auto* rt = static_cast<Step*>(self)->owner;
                      if (d == Disposition::drop || !rt->client.on_reply())
                        return rt->finished.wake();
                      Scheduler::current()->submit(rt->server, /*prefer_local=*/false);
                    }};
  // The server: queue the reply delivery, then (maybe) keep running a little.
  Step server{this, [](WorkItem* self, Disposition d) noexcept {
                auto* rt = static_cast<Step*>(self)->owner;
                if (d == Disposition::drop) return rt->finished.wake();
                Scheduler::current()->submit(rt->reply, /*prefer_local=*/false);
                if (rt->config.housekeeping) roundtrip::busy_for(rt->config.tail_ns);
              }};
  // The reply delivery: complete the request; the continuation runs asynchronously.
  Step reply{this, [](WorkItem* self, Disposition d) noexcept {
               auto* rt = static_cast<Step*>(self)->owner;
               if (d == Disposition::drop) return rt->finished.wake();
               Scheduler::current()->submit(rt->continuation, /*prefer_local=*/true);
             }};
};

}  // namespace

int main(int argc, char** argv) {
  const roundtrip::Config config = roundtrip::parse(argc, argv);
  Scheduler scheduler(arbor::sched::SchedulerOptions{
      .workers = config.threads, .per_worker_parking = config.per_worker_parking});
  RoundTrip rt(config);
  rt.client.set_runtime("arbor");
  rt.client.start();
  scheduler.submit(rt.server);  // the first request comes from main; the rest from the pool
  rt.finished.wait();
  rt.client.report();
  if (std::getenv("ARBOR_COUNTERS") != nullptr) {
    auto c = scheduler.counters();
    std::fprintf(
        stderr,
        "arbor counters: run %llu parks %llu wakes %llu steals %llu spins %llu (found work %llu)\n",
        (unsigned long long)c.run, (unsigned long long)c.parks, (unsigned long long)c.wakes,
        (unsigned long long)c.steals, (unsigned long long)c.spins,
        (unsigned long long)c.spins_found_work);
  }
  return 0;
}
