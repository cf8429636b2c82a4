// The signal() shorthands, the same on every platform (signal_posix.cpp, signal_windows.cpp).
#include "arbor/runtime/signal.hpp"

namespace arbor {

Result<SignalListener> signal(Runtime& runtime, int signum) {
  const int one[] = {signum};
  return SignalListener::listen(runtime, one);
}

Result<SignalListener> signal(Runtime& runtime, std::initializer_list<int> signals) {
  return SignalListener::listen(runtime, {signals.begin(), signals.size()});
}

}  // namespace arbor
