// Ctrl-C for the example programs: SIGINT and SIGTERM are taken by a plain thread that waits for
// them (sigtimedwait), not by a signal handler, so what it does on a signal may take locks and
// call into the runtime.
//
//   const sigset_t signals = examples::block_stop_signals();  // first: before the runtime
//   arbor::Runtime rt;
//   examples::SignalThread on_signal(signals, [&](int nth) { rt.request_stop(); });
//   return rt.block_on(...);  // on_signal is joined before rt goes (declared after it)
//
// The thread is joined by the destructor, never detached: a detached one could still be inside
// the callback (in request_stop(), say) when the stop it caused lets main return and destroy
// the runtime. So it looks at its `done` flag every 100 ms.
#pragma once

#include <atomic>
#include <csignal>
#include <ctime>
#include <functional>
#include <thread>
#include <utility>

namespace examples {

/// Blocks SIGINT and SIGTERM in the calling thread, and so in every thread it starts later
/// (the runtime's): call it before making the runtime. Returns the set.
inline sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

/// Calls `on_signal(n)` on a thread of its own for the n-th signal of `signals` (n = 1, 2, …).
class SignalThread {
 public:
  SignalThread(sigset_t signals, std::function<void(int)> on_signal)
      : thread_([this, signals, on_signal = std::move(on_signal)] {
          const timespec tick{0, 100'000'000};
          for (int received = 0; !done_.load();)
            if (sigtimedwait(&signals, nullptr, &tick) > 0) on_signal(++received);
        }) {}
  ~SignalThread() {
    done_ = true;
    thread_.join();
  }
  SignalThread(const SignalThread&) = delete;
  SignalThread& operator=(const SignalThread&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;  // last: starts once done_ exists
};

}  // namespace examples
