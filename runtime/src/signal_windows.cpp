// SignalListener on Windows: console control events, from a console control handler.
//
// Windows runs the handler on a thread of its own, an ordinary thread (not a signal context),
// so the handler may lock and wake tasks directly: it sets the listener's pending bit for the
// signal and calls notify_one() on the listener's Notify (which keeps one permit for a recv()
// not yet waiting). recv() takes a pending bit, or waits on the Notify and looks again.
// Mapping: CTRL_C_EVENT is SIGINT; CTRL_BREAK_EVENT is SIGBREAK, or SIGINT to a listener not
// listening for SIGBREAK (the user interrupting, either way); CTRL_CLOSE_EVENT,
// CTRL_LOGOFF_EVENT and CTRL_SHUTDOWN_EVENT are SIGTERM (the platform asking the process to end).
//
// The console closing: Windows ends the process as soon as the handler returns (about 5 s
// after the close at the latest). So for SIGTERM the handler, having notified, waits until no
// SIGTERM listener is left: a program keeps its listener until its stop has run its course.
// With no listener for an event the handler returns FALSE: the next handler (the default one
// ends the process) takes it. The handler is registered with the first listener and removed
// with the last, as on POSIX.
// clang-format off
#include <winsock2.h>
#include <windows.h>
// clang-format on

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "arbor/runtime/notify.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/signal.hpp"

namespace arbor {

namespace detail {

struct SignalState {
  std::vector<int> signals;               // at most 32; bit i of `pending` is signals[i]
  std::atomic<std::uint32_t> pending{0};  // delivered, not yet returned by recv()
  Notify notify;
};

int deliver_console_event(unsigned long event) noexcept;

}  // namespace detail

namespace {

std::mutex registry_mutex;
std::condition_variable listener_gone;
std::vector<detail::SignalState*> registry;  // under registry_mutex

// The signals an event is, most specific first (0: none): a listener gets the first of them it
// listens for, so Ctrl-Break is SIGBREAK to a SIGBREAK listener and SIGINT to a SIGINT one.
std::array<int, 2> signals_of(unsigned long event) {
  switch (event) {
    case CTRL_C_EVENT:
      return {SIGINT, 0};
    case CTRL_BREAK_EVENT:
      return {SIGBREAK, SIGINT};
    case CTRL_CLOSE_EVENT:
    case CTRL_LOGOFF_EVENT:
    case CTRL_SHUTDOWN_EVENT:
      return {SIGTERM, 0};
    default:
      return {0, 0};
  }
}

bool listens_for(const detail::SignalState& state, int signum) {
  return std::find(state.signals.begin(), state.signals.end(), signum) != state.signals.end();
}

BOOL WINAPI on_console_event(DWORD event) {
  return detail::deliver_console_event(event);
}

}  // namespace

/// What the console control handler does with `event` (tests call it directly: wine cannot
/// always deliver console events). TRUE when some listener took it.
int detail::deliver_console_event(unsigned long event) noexcept {
  const std::array<int, 2> candidates = signals_of(event);
  std::unique_lock lock(registry_mutex);
  bool taken = false;
  for (detail::SignalState* state : registry) {
    for (int signum : candidates) {
      const auto at = std::find(state->signals.begin(), state->signals.end(), signum);
      if (signum == 0 || at == state->signals.end()) continue;
      const auto bit = std::uint32_t{1} << (at - state->signals.begin());
      state->pending.fetch_or(bit, std::memory_order_release);
      state->notify.notify_one();
      taken = true;
      break;
    }
  }
  if (!taken) return FALSE;
  if (candidates[0] == SIGTERM)  // returning lets Windows end the process: wait for the stop
    listener_gone.wait(lock, [] {
      return std::none_of(registry.begin(), registry.end(),
                          [](auto* s) { return listens_for(*s, SIGTERM); });
    });
  return TRUE;
}

Result<SignalListener> SignalListener::listen(Runtime&, std::span<const int> signals) {
  if (signals.empty()) return std::make_error_code(std::errc::invalid_argument);
  auto state = std::make_unique<detail::SignalState>();
  for (int signum : signals) {
    if (signum != SIGINT && signum != SIGBREAK && signum != SIGTERM)
      return std::make_error_code(std::errc::invalid_argument);
    if (!listens_for(*state, signum)) state->signals.push_back(signum);
  }
  std::lock_guard lock(registry_mutex);
  if (registry.empty() && !::SetConsoleCtrlHandler(&on_console_event, TRUE))
    return std::error_code(static_cast<int>(::GetLastError()), std::system_category());
  registry.push_back(state.get());
  return SignalListener(std::move(state));
}

Task<Result<int>> SignalListener::recv() {
  detail::SignalState* state = state_.get();
  if (state == nullptr) co_return std::make_error_code(std::errc::bad_file_descriptor);
  for (;;) {
    std::uint32_t pending = state->pending.load(std::memory_order_acquire);
    while (pending != 0) {
      const std::uint32_t lowest = pending & (~pending + 1);
      if (state->pending.compare_exchange_weak(pending, pending & ~lowest,
                                               std::memory_order_acq_rel)) {
        int index = 0;
        while ((std::uint32_t{1} << index) != lowest)
          ++index;
        co_return state->signals[static_cast<std::size_t>(index)];
      }
    }
    // A delivery after the load above has left a permit: notified() returns at once.
    if (auto woken = co_await state->notify.notified(); !woken) co_return woken.error();
  }
}

SignalListener::SignalListener(std::unique_ptr<detail::SignalState> state) noexcept
    : state_(std::move(state)) {}
SignalListener::SignalListener() noexcept = default;
SignalListener::SignalListener(SignalListener&&) noexcept = default;
SignalListener& SignalListener::operator=(SignalListener&& other) noexcept {
  SignalListener gone(std::move(*this));
  state_ = std::move(other.state_);
  return *this;
}

SignalListener::~SignalListener() {
  if (!state_) return;
  std::lock_guard lock(registry_mutex);  // a handler notifying it finishes first
  registry.erase(std::find(registry.begin(), registry.end(), state_.get()));
  if (registry.empty()) ::SetConsoleCtrlHandler(&on_console_event, FALSE);
  listener_gone.notify_all();  // a console close waiting for the SIGTERM listeners
}

Result<SignalListener> ctrl_c(Runtime& runtime) {
  return signal(runtime, SIGINT);
}

}  // namespace arbor
