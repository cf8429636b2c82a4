// SendResult<T>: the outcome of a channel send; on failure it hands the message back.
//
// Ownership: a message belongs to the channel once a send succeeds. When a send fails (the
// receiver is gone: channel_closed; no room for try_send: channel_full; the task was cancelled
// while it waited: operation_canceled) the channel never took it: it is returned, unmoved-from,
// in the result, for the caller to retry, log or drop.
//
// ChannelMessage<T>: what a channel that moves messages under its lock (mpsc, oneshot,
// broadcast) accepts. Its move constructor must not throw: a move that threw half-way through a
// hand-over would leave a waiter taken off its list and never woken, or a message in neither
// place. Wrap a type whose move may throw (libstdc++'s std::deque, say) in a std::unique_ptr.
#pragma once

#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

namespace arbor {

template <class T>
concept ChannelMessage = std::is_nothrow_move_constructible_v<T>;

template <class T>
class [[nodiscard]] SendResult {
 public:
  /// Success.
  SendResult() = default;
  /// Failure: `error`, and the message that was not sent.
  SendResult(std::error_code error, T message)
      : error_(error), message_(std::in_place, std::move(message)) {}

  bool has_value() const noexcept { return !error_; }
  explicit operator bool() const noexcept { return has_value(); }
  std::error_code error() const noexcept { return error_; }

  /// After a failure: the message that was not sent (empty after a success).
  std::optional<T>& message() noexcept { return message_; }
  /// After a failure: takes the message back.
  T take_message() { return std::move(*message_); }

 private:
  std::error_code error_;
  std::optional<T> message_;
};

}  // namespace arbor
