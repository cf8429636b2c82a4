// mpsc: multi-producer, single-consumer channels, bounded and unbounded.
//
//   auto [tx, rx] = arbor::mpsc::channel<Line>(64);       // bounded: send waits when full
//   co_await tx.send(line);                               // SendResult<Line>
//   while (auto line = co_await rx.recv()) use(*line);    // ends with channel_closed
//
//   auto [utx, urx] = arbor::mpsc::unbounded_channel<Job>();
//   utx.send(job);                                        // never waits
//
// Invariants, all under the channel's one spinlock: the receiver waits only while the queue is
// empty, and senders wait in FIFO order, a newcomer queueing behind any that wait. A sender
// that finds the queue full waits with its message; once recv() has freed half the ring it
// moves the waiting senders' messages in, in order, as many as fit, and wakes those senders
// (so a producer that runs ahead costs one wake-up per half ring, not one per message, and no
// sender waits when the queue is empty); when send() finds the receiver waiting, it hands the
// message straight to it. The bounded queue is a ring
// allocated when the channel is made: no allocation per message. The unbounded queue is a list
// of 32-message blocks with a drained block kept for reuse (message_queue.hpp): a consumer that
// keeps up causes no allocation after the first block.
//
// Closing: when the last Sender goes, the receiver gets the messages still queued, then
// channel_closed. Receiver::close() (or dropping the Receiver) makes every waiting and later
// send fail with channel_closed; messages already queued can still be received after close()
// and are destroyed with the Receiver.
//
// Cancellation: a send cancelled while it waits completes with operation_canceled and returns
// the message; a recv cancelled while it waits completes with operation_canceled. A sender
// whose message was already moved into the queue, or a receiver already handed a message, when
// the cancellation arrives keeps that outcome (the send succeeded; the message is received):
// no message is lost or duplicated.
//
// Ownership: the channel's state is shared by its ends and freed with the last of them. A
// message belongs to the channel once send succeeds; a failed send returns it to the caller in
// the SendResult. A message's move constructor and destructor run under the channel's lock and
// must not use the channel; the move must not throw (ChannelMessage, send_result.hpp, checked
// when the channel is made). The unbounded queue's block allocation may throw std::bad_alloc
// out of send(): the channel is left as it was and the message goes with the exception.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "arbor/result.hpp"
#include "arbor/runtime/message_queue.hpp"
#include "arbor/runtime/send_result.hpp"
#include "arbor/runtime/waiter_list.hpp"

namespace arbor::mpsc {

namespace detail {

template <class T>
struct Node : arbor::detail::Waiter {
  std::optional<T> message;
};

template <ChannelMessage T, class Queue>
struct State {
  explicit State(std::size_t capacity) : queue(capacity) {}

  arbor::detail::SpinLock lock;
  Queue queue;                          // guarded by lock
  arbor::detail::WaiterList senders;    // Node<T>s holding their message; bounded only
  arbor::detail::WaiterList receivers;  // at most one Node<T>
  std::size_t sender_count = 1;         // guarded by lock
  bool receiver_closed = false;         // guarded by lock

  // Under the lock: delivers `message` (to the waiting receiver or the queue) or says why not.
  // On success `message` is moved from.
  std::error_code push_locked(T& message, arbor::detail::WakeList& wake) {
    if (receiver_closed) return make_error_code(Errc::channel_closed);
    if (auto* r = static_cast<Node<T>*>(receivers.pop_front())) {
      r->message.emplace(std::move(message));
      wake.push(*r);
      return {};
    }
    // FIFO among senders: while some wait, a newcomer queues behind them even if there is room.
    if (queue.full() || !senders.empty()) return make_error_code(Errc::channel_full);
    queue.push(std::move(message));
    return {};
  }

  // Under the lock: takes the next message into `out`, refilling from a waiting sender, or says
  // why not (channel_empty: wait).
  std::error_code pop_locked(std::optional<T>& out, arbor::detail::WakeList& wake) {
    if (!queue.empty()) {
      out.emplace(queue.pop());
      // Waiting senders are let in once half the ring is free, as many as fit: one wake-up
      // per half ring instead of one per message for a producer that runs ahead.
      if (!senders.empty() && queue.size() <= queue.capacity() / 2) {
        while (!queue.full()) {
          auto* s = static_cast<Node<T>*>(senders.pop_front());
          if (s == nullptr) break;
          queue.push(std::move(*s->message));
          s->message.reset();
          wake.push(*s);
        }
      }
      return {};
    }
    if (sender_count == 0 || receiver_closed) return make_error_code(Errc::channel_closed);
    return make_error_code(Errc::channel_empty);
  }

  void add_sender() {
    std::lock_guard guard(lock);
    ++sender_count;
  }
  void drop_sender() {
    arbor::detail::WakeList wake;
    std::lock_guard guard(lock);
    if (--sender_count != 0) return;
    // The receiver waits only on an empty queue: nothing more will come.
    while (auto* r = receivers.pop_front())
      wake.push(*r, make_error_code(Errc::channel_closed));
  }
  void close_receiver() {
    arbor::detail::WakeList wake;
    std::lock_guard guard(lock);
    receiver_closed = true;
    // Each waiting sender gets its message back.
    while (auto* s = senders.pop_front())
      wake.push(*s, make_error_code(Errc::channel_closed));
    // A recv waiting now (close() called by another task) waits on an empty queue that no
    // send can fill any more: it ends as a recv started after close() would.
    while (auto* r = receivers.pop_front())
      wake.push(*r, make_error_code(Errc::channel_closed));
  }
};

// The ends' shared handling of the state.
template <class T, class Queue>
class SenderBase {
 public:
  SenderBase(const SenderBase& other) : state_(other.state_) {
    if (state_) state_->add_sender();
  }
  SenderBase(SenderBase&&) noexcept = default;
  SenderBase& operator=(SenderBase other) noexcept {
    std::swap(state_, other.state_);
    return *this;
  }
  ~SenderBase() {
    if (state_) state_->drop_sender();
  }
  /// Whether the receiver has closed or gone: every send would fail.
  bool is_closed() const {
    std::lock_guard guard(state_->lock);
    return state_->receiver_closed;
  }

 protected:
  explicit SenderBase(std::shared_ptr<State<T, Queue>> state) noexcept : state_(std::move(state)) {}

  // Sends now if the channel takes `message`; otherwise returns it with the reason.
  SendResult<T> push_now(T& message) {
    std::error_code e;
    {
      arbor::detail::WakeList wake;
      std::lock_guard guard(state_->lock);
      e = state_->push_locked(message, wake);
    }
    if (e) return {e, std::move(message)};
    return {};
  }

  std::shared_ptr<State<T, Queue>> state_;
};

}  // namespace detail

/// The consumer's end of a channel (move-only: one consumer).
template <class T, class Queue>
class BasicReceiver {
  using State = detail::State<T, Queue>;

 public:
  explicit BasicReceiver(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}
  BasicReceiver(BasicReceiver&&) noexcept = default;
  BasicReceiver& operator=(BasicReceiver&& other) noexcept {
    if (this != &other) {
      release();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ~BasicReceiver() { release(); }

  class [[nodiscard]] RecvAwaiter
      : public arbor::detail::ParkingAwaiter<RecvAwaiter, detail::Node<T>> {
   public:
    explicit RecvAwaiter(State& s) noexcept
        : arbor::detail::ParkingAwaiter<RecvAwaiter, detail::Node<T>>(s.lock, s.receivers),
          state_(s) {}

    Result<T> await_resume() {
      if (auto e = this->finish()) return e;
      return std::move(*this->node_.message);
    }
    bool try_locked(arbor::detail::WakeList& wake) {
      const std::error_code e = state_.pop_locked(this->node_.message, wake);
      if (e == Errc::channel_empty) return false;
      this->node_.error = e;
      return true;
    }

   private:
    State& state_;
  };

  /// `co_await rx.recv()`: Result<T>, the next message; channel_closed once every sender is
  /// gone (or close() was called) and the queue is drained; operation_canceled if the task is
  /// cancelled while it waits.
  RecvAwaiter recv() noexcept { return RecvAwaiter(*state_); }

  /// The next message if there is one now; channel_empty (open, nothing now) or channel_closed.
  Result<T> try_recv() {
    std::optional<T> out;
    std::error_code e;
    {
      arbor::detail::WakeList wake;
      std::lock_guard guard(state_->lock);
      e = state_->pop_locked(out, wake);
    }
    if (e) return e;
    return std::move(*out);
  }

  /// Refuses further sends (they fail with channel_closed, waiting ones too, each returning its
  /// message); messages already queued can still be received. A recv waiting meanwhile (in
  /// another task) ends with channel_closed.
  void close() { state_->close_receiver(); }

  /// Messages queued now (racy: for tests and metrics).
  std::size_t size() const {
    std::lock_guard guard(state_->lock);
    return state_->queue.size();
  }

 private:
  void release() {
    if (!state_) return;
    close();
    std::lock_guard guard(state_->lock);
    state_->queue.clear();
  }
  std::shared_ptr<State> state_;
};

template <class T>
using Receiver = BasicReceiver<T, arbor::detail::RingQueue<T>>;
template <class T>
using UnboundedReceiver = BasicReceiver<T, arbor::detail::SegmentQueue<T>>;

/// A producer's end of a bounded channel; copy it for more producers. The channel closes for
/// the receiver when the last copy goes.
template <class T>
class Sender : public detail::SenderBase<T, arbor::detail::RingQueue<T>> {
  using State = detail::State<T, arbor::detail::RingQueue<T>>;
  using Base = detail::SenderBase<T, arbor::detail::RingQueue<T>>;

 public:
  explicit Sender(std::shared_ptr<State> state) noexcept : Base(std::move(state)) {}

  class [[nodiscard]] SendAwaiter
      : public arbor::detail::ParkingAwaiter<SendAwaiter, detail::Node<T>> {
   public:
    SendAwaiter(State& s, T message)
        : arbor::detail::ParkingAwaiter<SendAwaiter, detail::Node<T>>(s.lock, s.senders),
          state_(s) {
      this->node_.message.emplace(std::move(message));
    }

    SendResult<T> await_resume() {
      if (auto e = this->finish()) return {e, std::move(*this->node_.message)};
      return {};
    }
    bool try_locked(arbor::detail::WakeList& wake) {
      const std::error_code e = state_.push_locked(*this->node_.message, wake);
      if (e == Errc::channel_full) return false;
      if (!e) this->node_.message.reset();
      this->node_.error = e;
      return true;
    }

   private:
    State& state_;
  };

  /// `co_await tx.send(m)`: waits while the channel is full. SendResult<T>: success, or
  /// channel_closed (receiver closed or gone) or operation_canceled, with `m` returned.
  SendAwaiter send(T message) { return SendAwaiter(*this->state_, std::move(message)); }

  /// Sends now if there is room; channel_full or channel_closed otherwise, `m` returned.
  SendResult<T> try_send(T message) { return this->push_now(message); }

  std::size_t capacity() const noexcept { return this->state_->queue.capacity(); }
};

/// A producer's end of an unbounded channel; send never waits. Copy it for more producers.
template <class T>
class UnboundedSender : public detail::SenderBase<T, arbor::detail::SegmentQueue<T>> {
  using State = detail::State<T, arbor::detail::SegmentQueue<T>>;
  using Base = detail::SenderBase<T, arbor::detail::SegmentQueue<T>>;

 public:
  explicit UnboundedSender(std::shared_ptr<State> state) noexcept : Base(std::move(state)) {}

  /// Queues `m` (allocating a block every 32 queued messages when the queue grows; see above).
  /// Fails only with channel_closed, returning `m`.
  SendResult<T> send(T message) { return this->push_now(message); }
};

/// A bounded channel of `capacity` >= 1 messages (the ring is allocated here, once). Throws
/// std::invalid_argument for capacity 0 (a channel that could never hold a message).
template <ChannelMessage T>
std::pair<Sender<T>, Receiver<T>> channel(std::size_t capacity) {
  if (capacity == 0) throw std::invalid_argument("arbor::mpsc::channel: capacity 0");
  auto state = std::make_shared<detail::State<T, arbor::detail::RingQueue<T>>>(capacity);
  return {Sender<T>(state), Receiver<T>(state)};
}

/// An unbounded channel: send never waits (memory is the limit).
template <ChannelMessage T>
std::pair<UnboundedSender<T>, UnboundedReceiver<T>> unbounded_channel() {
  auto state = std::make_shared<detail::State<T, arbor::detail::SegmentQueue<T>>>(0);
  return {UnboundedSender<T>(state), UnboundedReceiver<T>(state)};
}

}  // namespace arbor::mpsc
