// Ctrl-C for the example programs. On POSIX, SIGINT and SIGTERM are taken by a plain thread that
// waits for them (sigtimedwait), not by a signal handler, so what it does on a signal may take
// locks and call into the runtime. On Windows, a console control handler (Ctrl-C, Ctrl-Break, the
// console closing) does the same: the system runs it on a thread of its own.
//
//   const auto signals = examples::block_stop_signals();  // first: before the runtime
//   arbor::Runtime rt;
//   examples::SignalThread on_signal(signals, [&](int nth) { rt.request_stop(); });
//   return rt.block_on(...);  // on_signal is joined before rt goes (declared after it)
//
// The POSIX thread is joined by the destructor, never detached: a detached one could still be
// inside the callback (in request_stop(), say) when the stop it caused lets main return and
// destroy the runtime. So it looks at its `done` flag every 100 ms. On Windows the destructor
// unregisters the handler and waits out a call in progress. The console closing is different:
// Windows ends the process as soon as the handler returns (and at the latest about 5 s after
// the close), so for that event the handler, once it has called `on_signal`, waits until the
// SignalThread is destroyed, i.e. until the stop it asked for has run its course.
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <utility>

#if defined(_WIN32)
#include <windows.h>

#include <mutex>
#else
#include <csignal>
#include <ctime>
#endif

namespace examples {

#if defined(_WIN32)

struct StopSignals {};  // nothing to block: the console handler is registered by SignalThread

inline StopSignals block_stop_signals() {
  return {};
}

/// Calls `on_signal(n)` for the n-th Ctrl-C, Ctrl-Break or console close (n = 1, 2, …). One
/// at a time per process.
class SignalThread {
 public:
  SignalThread(StopSignals, std::function<void(int)> on_signal) {
    std::lock_guard lock(mutex());
    on_signal_ = std::move(on_signal);
    current() = this;
    ::SetConsoleCtrlHandler(&handle, TRUE);
  }
  ~SignalThread() {
    ::SetConsoleCtrlHandler(&handle, FALSE);
    {
      std::lock_guard lock(mutex());  // a call in progress ends first
      current() = nullptr;
    }
    ::SetEvent(finished());  // a console close may now end the process
  }
  SignalThread(const SignalThread&) = delete;
  SignalThread& operator=(const SignalThread&) = delete;

 private:
  static BOOL WINAPI handle(DWORD event) {
    if (event != CTRL_C_EVENT && event != CTRL_BREAK_EVENT && event != CTRL_CLOSE_EVENT)
      return FALSE;
    {
      std::lock_guard lock(mutex());
      SignalThread* self = current();
      if (self == nullptr) return FALSE;  // the next handler (the default one ends the process)
      self->on_signal_(++self->received_);
    }
    // Returning lets Windows end the process at once on a console close: wait for the end of
    // the graceful stop first (Windows still cuts it off after about 5 s).
    if (event == CTRL_CLOSE_EVENT) ::WaitForSingleObject(finished(), INFINITE);
    return TRUE;
  }
  // Set by the destructor; never closed (a handler thread may wait on it while the process ends).
  static HANDLE finished() {
    static const HANDLE event = ::CreateEventW(nullptr, TRUE, FALSE, nullptr);
    return event;
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static SignalThread*& current() {
    static SignalThread* p = nullptr;
    return p;
  }

  std::function<void(int)> on_signal_;
  int received_ = 0;
};

#else

using StopSignals = sigset_t;

/// Blocks SIGINT and SIGTERM in the calling thread, and so in every thread it starts later
/// (the runtime's): call it before making the runtime. Returns the set.
inline StopSignals block_stop_signals() {
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
  SignalThread(StopSignals signals, std::function<void(int)> on_signal)
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

#endif

}  // namespace examples
