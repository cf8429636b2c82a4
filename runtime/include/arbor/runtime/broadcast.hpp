// broadcast: every receiver sees every message, from a bounded ring; a slow receiver is told
// how many it missed instead of slowing the senders down.
//
//   auto [tx, rx] = arbor::broadcast::channel<Event>(1024);
//   auto rx2 = tx.subscribe();                 // sees messages sent from now on
//   tx.send(event);                            // never waits
//   auto e = co_await rx.recv();               // Result<Event>
//   if (e.error() == arbor::Errc::channel_lagged) log(rx.missed());  // then recv again
//
// Invariant (under the channel's spinlock): message number s (counting from 0) lives in
// ring[s % capacity] until message s + capacity overwrites it; `tail` is the next number. Each
// receiver keeps the number it reads next. One behind by more than the capacity has lost
// messages: its next recv() completes at once with channel_lagged, moves it to the oldest
// message still held and records how many it skipped (missed()). A receiver waits only when
// it has read everything; send() hands a copy straight to each waiting receiver. The ring is
// allocated when the channel is made; send copies the message once per waiting receiver and
// moves it into the ring, with no allocation of its own.
//
// Closing: when the last Sender goes, receivers read what is left, then get channel_closed.
// send() with no receiver left fails with channel_closed and returns the message.
//
// Cancellation: a recv cancelled while it waits completes with operation_canceled and its
// receiver reads on from where it was; one already handed a copy when the cancellation arrives
// keeps it.
//
// Ownership: T must be copyable: each receiver gets its own copy; the ring's copy belongs to
// the channel. A failed send returns the message in the SendResult. T's copy and move
// constructors run under the channel's lock and must not use the channel; a send whose copy
// throws sends nothing and lets the exception through. T's move must not throw
// (ChannelMessage, send_result.hpp, checked when the channel is made).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "arbor/result.hpp"
#include "arbor/runtime/send_result.hpp"
#include "arbor/runtime/waiter_list.hpp"

namespace arbor::broadcast {

namespace detail {

template <class T>
struct Node : arbor::detail::Waiter {
  std::optional<T> message;
  std::uint64_t* next = nullptr;  // the receiver's cursor
};

template <class T>
struct State {
  explicit State(std::size_t cap)
      : ring(std::make_unique<std::optional<T>[]>(cap)), capacity(cap) {}

  arbor::detail::SpinLock lock;
  std::unique_ptr<std::optional<T>[]> ring;  // guarded by lock
  const std::size_t capacity;
  std::uint64_t tail = 0;                  // guarded by lock: the next message's number
  arbor::detail::WaiterList waiting;       // Node<T>s, each caught up (next == tail)
  std::size_t senders = 1, receivers = 1;  // guarded by lock

  std::uint64_t oldest() const noexcept { return tail > capacity ? tail - capacity : 0; }

  // Under the lock: the next message for a receiver at `next`, or why not (channel_empty:
  // wait). On channel_lagged `missed` is set and `next` moved to the oldest message held.
  std::error_code read_locked(std::uint64_t& next, std::uint64_t& missed, std::optional<T>& out) {
    if (next < oldest()) {
      missed = oldest() - next;
      next = oldest();
      return make_error_code(Errc::channel_lagged);
    }
    if (next < tail) {
      out.emplace(*ring[next % capacity]);
      ++next;
      return {};
    }
    if (senders == 0) return make_error_code(Errc::channel_closed);
    return make_error_code(Errc::channel_empty);
  }
};

}  // namespace detail

template <class T>
class Receiver;

/// A producer's end; copy it for more producers. send() never waits.
template <class T>
class Sender {
  using State = detail::State<T>;

 public:
  explicit Sender(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}
  Sender(const Sender& other) : state_(other.state_) {
    std::lock_guard guard(state_->lock);
    ++state_->senders;
  }
  Sender(Sender&&) noexcept = default;
  Sender& operator=(Sender other) noexcept {
    std::swap(state_, other.state_);
    return *this;
  }
  ~Sender() {
    if (!state_) return;
    arbor::detail::WakeList wake;
    std::lock_guard guard(state_->lock);
    if (--state_->senders != 0) return;
    // Waiting receivers have read everything: nothing more will come.
    while (auto* r = state_->waiting.pop_front())
      wake.push(*r, make_error_code(Errc::channel_closed));
  }

  /// Sends `message` to every receiver (never waits; overwrites the oldest message when the
  /// ring is full). channel_closed, with `message` returned, if no receiver is left.
  SendResult<T> send(T message) {
    arbor::detail::WakeList wake;
    std::lock_guard guard(state_->lock);
    State& s = *state_;
    if (s.receivers == 0) return {make_error_code(Errc::channel_closed), std::move(message)};
    // Copy for every waiting receiver first, leaving them queued: if a copy throws, the copies
    // made are dropped and the exception leaves the channel as it was (no receiver is taken
    // off the list without being woken).
    using Node = detail::Node<T>;
    try {
      for (auto* w = s.waiting.front(); w != nullptr; w = w->next)
        static_cast<Node*>(w)->message.emplace(message);
    } catch (...) {
      for (auto* w = s.waiting.front(); w != nullptr; w = w->next)
        static_cast<Node*>(w)->message.reset();
      throw;
    }
    while (auto* r = static_cast<Node*>(s.waiting.pop_front())) {
      *r->next = s.tail + 1;
      wake.push(*r);
    }
    s.ring[s.tail % s.capacity].emplace(std::move(message));
    ++s.tail;
    return {};
  }

  /// A new receiver that sees the messages sent from now on.
  Receiver<T> subscribe() {
    std::lock_guard guard(state_->lock);
    ++state_->receivers;
    return Receiver<T>(state_, state_->tail);
  }

  std::size_t receiver_count() const {
    std::lock_guard guard(state_->lock);
    return state_->receivers;
  }

 private:
  std::shared_ptr<State> state_;
};

/// A consumer's end (move-only; more come from Sender::subscribe()).
template <class T>
class Receiver {
  using State = detail::State<T>;

 public:
  Receiver(std::shared_ptr<State> state, std::uint64_t next) noexcept
      : state_(std::move(state)), next_(next) {}
  Receiver(Receiver&& other) noexcept
      : state_(std::move(other.state_)), next_(other.next_), missed_(other.missed_) {}
  Receiver& operator=(Receiver&& other) noexcept {
    if (this != &other) {
      drop();
      state_ = std::move(other.state_);
      next_ = other.next_;
      missed_ = other.missed_;
    }
    return *this;
  }
  ~Receiver() { drop(); }

  class [[nodiscard]] RecvAwaiter
      : public arbor::detail::ParkingAwaiter<RecvAwaiter, detail::Node<T>> {
   public:
    explicit RecvAwaiter(Receiver& r) noexcept
        : arbor::detail::ParkingAwaiter<RecvAwaiter, detail::Node<T>>(r.state_->lock,
                                                                      r.state_->waiting),
          rx_(r) {
      this->node_.next = &r.next_;
    }

    Result<T> await_resume() {
      if (auto e = this->finish()) return e;
      return std::move(*this->node_.message);
    }
    bool try_locked(arbor::detail::WakeList&) {
      const std::error_code e =
          rx_.state_->read_locked(rx_.next_, rx_.missed_, this->node_.message);
      if (e == Errc::channel_empty) return false;
      this->node_.error = e;
      return true;
    }

   private:
    Receiver& rx_;
  };

  /// `co_await rx.recv()`: Result<T>, a copy of the next message; channel_lagged if this
  /// receiver fell more than the capacity behind (see missed(); the next recv() reads the
  /// oldest message held); channel_closed once every sender is gone and everything was read;
  /// operation_canceled if the task is cancelled while it waits.
  RecvAwaiter recv() noexcept { return RecvAwaiter(*this); }

  /// Like recv() without waiting: channel_empty when there is nothing new.
  Result<T> try_recv() {
    std::optional<T> out;
    std::error_code e;
    {
      std::lock_guard guard(state_->lock);
      e = state_->read_locked(next_, missed_, out);
    }
    if (e) return e;
    return std::move(*out);
  }

  /// How many messages the last channel_lagged result skipped.
  std::uint64_t missed() const noexcept { return missed_; }

 private:
  void drop() {
    if (!state_) return;
    std::lock_guard guard(state_->lock);
    --state_->receivers;
  }
  std::shared_ptr<State> state_;
  std::uint64_t next_;        // guarded by the state's lock while a recv waits
  std::uint64_t missed_ = 0;  // written by this receiver's own recv (under the lock)
};

/// A channel whose ring holds the last `capacity` >= 1 messages, and its first receiver. Throws
/// std::invalid_argument for capacity 0.
template <ChannelMessage T>
std::pair<Sender<T>, Receiver<T>> channel(std::size_t capacity) {
  if (capacity == 0) throw std::invalid_argument("arbor::broadcast::channel: capacity 0");
  auto state = std::make_shared<detail::State<T>>(capacity);
  return {Sender<T>(state), Receiver<T>(state, 0)};
}

}  // namespace arbor::broadcast
