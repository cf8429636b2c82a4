// oneshot: a channel for exactly one value, from one sender to one receiver.
//
//   auto [tx, rx] = arbor::oneshot::channel<Reply>();
//   rt.spawn(work(std::move(tx)));      // ... std::move(tx).send(reply);
//   Result<Reply> reply = co_await rx.recv();
//
// Invariant (under the channel's spinlock): the value goes either straight to a waiting
// receiver or into the state's slot; the sender is spent after one send; the receiver gets
// the value at most once, then channel_closed.
//
// Closing: a Sender dropped without sending wakes the receiver with channel_closed. A Receiver
// closed or dropped makes send fail with channel_closed, returning the value.
//
// Cancellation: a recv cancelled while it waits completes with operation_canceled and the
// value, if it comes later, stays in the channel for the next recv(). A receiver already
// handed the value when the cancellation arrives keeps it.
//
// Ownership: the state is shared by the two ends and freed with the last. The value belongs to
// the channel once send succeeds; a failed send returns it in the SendResult. The value's move
// runs under the channel's lock and must not throw (ChannelMessage, send_result.hpp).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "arbor/result.hpp"
#include "arbor/runtime/send_result.hpp"
#include "arbor/runtime/waiter_list.hpp"

namespace arbor::oneshot {

namespace detail {

template <class T>
struct Node : arbor::detail::Waiter {
  std::optional<T> value;
};

template <class T>
struct State {
  arbor::detail::SpinLock lock;
  std::optional<T> value;              // guarded by lock: sent, not yet received
  arbor::detail::WaiterList receiver;  // at most one Node<T>
  bool sender_done = false;            // sent or dropped
  bool receiver_closed = false;
};

}  // namespace detail

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

  /// Sends the value (never waits) and spends the sender: `std::move(tx).send(v)`.
  /// channel_closed, with `value` returned, if the receiver is closed or gone.
  SendResult<T> send(T value) && {
    auto state = std::move(state_);
    arbor::detail::WakeList wake;
    std::lock_guard guard(state->lock);
    state->sender_done = true;
    if (state->receiver_closed) return {make_error_code(Errc::channel_closed), std::move(value)};
    if (auto* r = static_cast<detail::Node<T>*>(state->receiver.pop_front())) {
      r->value.emplace(std::move(value));
      wake.push(*r);
    } else {
      state->value.emplace(std::move(value));
    }
    return {};
  }

  /// Whether the receiver is closed or gone (a send would fail).
  bool is_closed() const {
    std::lock_guard guard(state_->lock);
    return state_->receiver_closed;
  }

 private:
  void drop() {
    if (!state_) return;
    auto state = std::move(state_);
    arbor::detail::WakeList wake;
    std::lock_guard guard(state->lock);
    state->sender_done = true;
    if (auto* r = state->receiver.pop_front()) wake.push(*r, make_error_code(Errc::channel_closed));
  }
  std::shared_ptr<State> state_;
};

template <class T>
class Receiver {
  using State = detail::State<T>;

 public:
  explicit Receiver(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}
  Receiver(Receiver&&) noexcept = default;
  Receiver& operator=(Receiver&& other) noexcept {
    if (this != &other) {
      close();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ~Receiver() { close(); }

  class [[nodiscard]] RecvAwaiter
      : public arbor::detail::ParkingAwaiter<RecvAwaiter, detail::Node<T>> {
   public:
    explicit RecvAwaiter(State& s) noexcept
        : arbor::detail::ParkingAwaiter<RecvAwaiter, detail::Node<T>>(s.lock, s.receiver),
          state_(s) {}

    Result<T> await_resume() {
      if (auto e = this->finish()) return e;
      return std::move(*this->node_.value);
    }
    bool try_locked(arbor::detail::WakeList&) {
      if (state_.value) {
        this->node_.value.emplace(std::move(*state_.value));
        state_.value.reset();
        return true;
      }
      if (!state_.sender_done && !state_.receiver_closed) return false;
      this->node_.error = make_error_code(Errc::channel_closed);
      return true;
    }

   private:
    State& state_;
  };

  /// `co_await rx.recv()`: Result<T>, the value; channel_closed if the sender went without
  /// sending (or the value was received already); operation_canceled if cancelled meanwhile.
  RecvAwaiter recv() noexcept { return RecvAwaiter(*state_); }

  /// The value if it has been sent; channel_empty (not yet) or channel_closed.
  Result<T> try_recv() {
    std::lock_guard guard(state_->lock);
    if (state_->value) {
      T v = std::move(*state_->value);
      state_->value.reset();
      return v;
    }
    if (!state_->sender_done && !state_->receiver_closed)
      return make_error_code(Errc::channel_empty);
    return make_error_code(Errc::channel_closed);
  }

  /// Refuses the value: a later send fails and returns it. A value sent already stays
  /// receivable. A recv waiting meanwhile (in another task) ends with channel_closed: the
  /// value can no longer come.
  void close() {
    if (!state_) return;
    arbor::detail::WakeList wake;
    std::lock_guard guard(state_->lock);
    state_->receiver_closed = true;
    if (auto* r = state_->receiver.pop_front())
      wake.push(*r, make_error_code(Errc::channel_closed));
  }

 private:
  std::shared_ptr<State> state_;
};

template <ChannelMessage T>
std::pair<Sender<T>, Receiver<T>> channel() {
  auto state = std::make_shared<detail::State<T>>();
  return {Sender<T>(state), Receiver<T>(state)};
}

}  // namespace arbor::oneshot
