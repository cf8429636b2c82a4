// A downstream program using the installed arbor: runs one item and exits 0 if it ran.
#include <arbor/sched/scheduler.hpp>
#include <arbor/sync/thread_blocker.hpp>
#include <cstdio>

namespace {
struct Hello : arbor::sched::WorkItem {
  Hello() : WorkItem(&run) {}
  static void run(WorkItem* self, arbor::sched::Disposition d) noexcept {
    auto* h = static_cast<Hello*>(self);
    h->ran = d == arbor::sched::Disposition::run;
    h->done.wake();
  }
  bool ran = false;
  arbor::sync::ThreadBlocker done;
};
}  // namespace

int main() {
  arbor::sched::Scheduler scheduler(arbor::sched::SchedulerOptions{.workers = 1});
  Hello hello;
  scheduler.submit(hello);
  hello.done.wait();
  std::puts(hello.ran ? "ran" : "dropped");
  return hello.ran ? 0 : 1;
}
