// SignalListener: process signals as a stream a task awaits.
//
//   auto stop = arbor::signal(rt, {SIGINT, SIGTERM});   // Result<SignalListener>, now
//   int signum = (co_await stop->recv()).value();       // the next delivery: SIGINT or SIGTERM
//
// Invariant: every delivery of a signal reaches every listener of that signal that existed when
// it arrived, and is returned by one of its recv() calls, except that deliveries of the same
// signal arriving before the listener has returned the previous one coalesce into it (Tokio's
// semantics: N signals before a recv() give at least one wakeup, never a lost last one). A
// listener made after a delivery never sees it. Any number of listeners, in any number of
// runtimes, may listen for the same signal.
//
// POSIX: a signal handler is installed for a signal when its first listener is made; it does
// only async-signal-safe work (atomics and send(2) of one byte to each listener's own socket
// pair). When the last listener of a signal goes, the disposition it replaced (usually SIG_DFL)
// is put back, as libuv does: a program that no longer listens gets the default behaviour again
// (Ctrl-C ends it) instead of having its signals swallowed. SIGKILL and SIGSTOP cannot be
// caught, and SIGSEGV, SIGBUS, SIGILL and SIGFPE are faults a handler cannot return from: those
// give invalid_argument. Each listener holds two descriptors (a socket pair, its read end
// attached to the runtime's engine); nothing global holds one.
//
// Windows: the console control events, delivered by a console control handler on a thread of
// the system's. SIGINT is Ctrl-C or Ctrl-Break, SIGBREAK is Ctrl-Break alone, and SIGTERM is the
// console closing (or logoff and shutdown, which only services see): the platform asking the
// process to end. So `{SIGINT, SIGTERM}` means "stop" on every platform.
// Other numbers give invalid_argument. For SIGTERM Windows ends the process as soon as the
// handler returns (and about 5 s after the close at the latest), so the handler returns only
// once every SIGTERM listener is gone: keep that listener until the program's stop has run its
// course.
//
// Ownership: a SignalListener is move-only and belongs to whoever holds it; it must not outlive
// its runtime (like a socket). Destroying it stops the listening and frees its descriptors; it
// must not be destroyed while a recv() is pending.
#pragma once

#include <csignal>
#include <initializer_list>
#include <memory>
#include <span>

#include "arbor/result.hpp"
#include "arbor/runtime/task.hpp"

#if defined(_WIN32) && !defined(SIGBREAK)
#define SIGBREAK 21  // the Microsoft C runtime's number
#endif

namespace arbor {

class Runtime;

namespace detail {
struct SignalState;
}

class SignalListener {
 public:
  SignalListener() noexcept;  // listens for nothing (recv() gives bad_file_descriptor)
  SignalListener(SignalListener&&) noexcept;
  SignalListener& operator=(SignalListener&&) noexcept;
  ~SignalListener();

  /// Listens for each of `signals` (at least one) in `runtime` from now on. invalid_argument
  /// for a signal that cannot be listened for (above); otherwise a system error.
  static Result<SignalListener> listen(Runtime& runtime, std::span<const int> signals);

  /// The next delivery: which signal it was. operation_canceled when the task is cancelled
  /// (the runtime stopping, say); bad_file_descriptor on a moved-from listener. Await each
  /// call once, one at a time per listener.
  Task<Result<int>> recv();

 private:
  explicit SignalListener(std::unique_ptr<detail::SignalState> state) noexcept;
  std::unique_ptr<detail::SignalState> state_;
};

/// A listener for one signal, e.g. `arbor::signal(rt, SIGTERM)`.
Result<SignalListener> signal(Runtime& runtime, int signum);
/// A listener for several, e.g. `arbor::signal(rt, {SIGINT, SIGTERM})`.
Result<SignalListener> signal(Runtime& runtime, std::initializer_list<int> signals);
/// Ctrl-C at the terminal: signal(runtime, SIGINT).
Result<SignalListener> ctrl_c(Runtime& runtime);

}  // namespace arbor
