// watch: the latest value of something, for any number of readers that want to know when it
// changes (configuration, a connection's state, "shutting down").
//
//   auto [tx, rx] = arbor::watch::channel<Config>(initial);
//   tx.send(new_config);                    // replaces the value, wakes changed() waiters
//   while (co_await rx.changed()) apply(rx.borrow());
//
// Invariant (under the channel's spinlock): the state holds one value and a version that
// send() increments; each receiver remembers the version it has seen. changed() completes at
// once if the version moved since (marking it seen), and otherwise waits for the next send,
// which marks each waiting receiver seen and wakes it. Intermediate values may be skipped:
// a receiver sees the latest, not every one. No allocation after the channel is made.
//
// Closing: when the Sender goes, waiting and later changed() calls complete with
// channel_closed (after any change not yet seen); borrow() still returns the last value.
// send() with no receiver left stores the value anyway and reports channel_closed.
//
// Cancellation: a changed() cancelled while it waits completes with operation_canceled and
// the receiver's seen version is unchanged; one already woken by a send keeps its success.
//
// Ownership: the value belongs to the channel; borrow() returns a copy (T must be copyable).
// T's copy constructor and assignment run under the channel's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "arbor/result.hpp"
#include "arbor/runtime/waiter_list.hpp"

namespace arbor::watch {

namespace detail {

struct Node : arbor::detail::Waiter {
  std::uint64_t* seen = nullptr;  // the receiver's seen version
};

template <class T>
struct State {
  explicit State(T initial) : value(std::move(initial)) {}
  arbor::detail::SpinLock lock;
  T value;                            // guarded by lock
  std::uint64_t version = 0;          // guarded by lock
  arbor::detail::WaiterList waiting;  // Nodes whose receivers have seen `version`
  bool sender_alive = true;           // guarded by lock
  std::size_t receivers = 1;          // guarded by lock
};

}  // namespace detail

template <class T>
class Receiver;

/// The one writer's end (move-only).
template <class T>
class Sender {
  using State = detail::State<T>;

 public:
  explicit Sender(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}
  Sender(Sender&&) noexcept = default;
  Sender& operator=(Sender&& other) noexcept {
    if (this != &other) {
      drop();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ~Sender() { drop(); }

  /// Replaces the value and wakes the receivers waiting in changed(). channel_closed if no
  /// receiver is left (the value is stored all the same).
  Result<void> send(T value) {
    arbor::detail::WakeList wake;
    std::lock_guard guard(state_->lock);
    State& s = *state_;
    s.value = std::move(value);
    ++s.version;
    while (auto* w = static_cast<detail::Node*>(s.waiting.pop_front())) {
      *w->seen = s.version;
      wake.push(*w);
    }
    if (s.receivers == 0) return make_error_code(Errc::channel_closed);
    return {};
  }

  /// A new receiver that has seen the current value.
  Receiver<T> subscribe() {
    std::lock_guard guard(state_->lock);
    ++state_->receivers;
    return Receiver<T>(state_, state_->version);
  }

  /// A copy of the current value.
  T borrow() const {
    std::lock_guard guard(state_->lock);
    return state_->value;
  }

 private:
  void drop() {
    if (!state_) return;
    auto state = std::move(state_);
    arbor::detail::WakeList wake;
    std::lock_guard guard(state->lock);
    state->sender_alive = false;
    while (auto* w = state->waiting.pop_front())
      wake.push(*w, make_error_code(Errc::channel_closed));
  }
  std::shared_ptr<State> state_;
};

/// A reader's end; copies share nothing but the channel (each has its own seen version).
template <class T>
class Receiver {
  using State = detail::State<T>;

 public:
  Receiver(std::shared_ptr<State> state, std::uint64_t seen) noexcept
      : state_(std::move(state)), seen_(seen) {}
  Receiver(const Receiver& other) : state_(other.state_) {
    std::lock_guard guard(state_->lock);
    ++state_->receivers;
    seen_ = other.seen_;
  }
  Receiver(Receiver&& other) noexcept : state_(std::move(other.state_)), seen_(other.seen_) {}
  Receiver& operator=(Receiver other) noexcept {
    std::swap(state_, other.state_);
    std::swap(seen_, other.seen_);
    return *this;
  }
  ~Receiver() {
    if (!state_) return;
    std::lock_guard guard(state_->lock);
    --state_->receivers;
  }

  class [[nodiscard]] ChangedAwaiter
      : public arbor::detail::ParkingAwaiter<ChangedAwaiter, detail::Node> {
   public:
    explicit ChangedAwaiter(Receiver& r) noexcept
        : arbor::detail::ParkingAwaiter<ChangedAwaiter, detail::Node>(r.state_->lock,
                                                                      r.state_->waiting),
          rx_(r) {
      this->node_.seen = &r.seen_;
    }

    Result<void> await_resume() noexcept { return this->finish(); }
    bool try_locked(arbor::detail::WakeList&) noexcept {
      State& s = *rx_.state_;
      if (rx_.seen_ != s.version) {
        rx_.seen_ = s.version;
        return true;
      }
      if (s.sender_alive) return false;
      this->node_.error = make_error_code(Errc::channel_closed);
      return true;
    }

   private:
    Receiver& rx_;
  };

  /// `co_await rx.changed()`: Result<void> once the value has changed since this receiver
  /// last saw it (then marked seen); channel_closed once the sender is gone and no change is
  /// unseen; operation_canceled if the task is cancelled while it waits.
  ChangedAwaiter changed() noexcept { return ChangedAwaiter(*this); }

  /// A copy of the current value (does not mark it seen).
  T borrow() const {
    std::lock_guard guard(state_->lock);
    return state_->value;
  }
  /// A copy of the current value, marked seen.
  T borrow_and_update() {
    std::lock_guard guard(state_->lock);
    seen_ = state_->version;
    return state_->value;
  }
  /// Whether a change has not been seen yet.
  bool has_changed() const {
    std::lock_guard guard(state_->lock);
    return seen_ != state_->version;
  }

 private:
  std::shared_ptr<State> state_;
  std::uint64_t seen_;  // guarded by the state's lock while changed() waits
};

/// A channel holding `initial`, and its first receiver (which has seen it).
template <class T>
std::pair<Sender<T>, Receiver<T>> channel(T initial) {
  auto state = std::make_shared<detail::State<T>>(std::move(initial));
  return {Sender<T>(state), Receiver<T>(state, 0)};
}

}  // namespace arbor::watch
