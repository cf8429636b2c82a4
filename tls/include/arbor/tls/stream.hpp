// tls::Stream<S>: TLS over any arbor byte stream S (TcpStream, UnixStream, or anything with
// read_some and write_some awaitables giving Result<std::size_t>), client or server.
//
//   auto tls = co_await arbor::tls::connect(client_context, std::move(tcp), "example.com");
//   if (!tls) { ... tls.error().message() ... }  // e.g. "certificate verify failed: hostname
//   mismatch" co_await tls->write_all(request); auto n = co_await tls->read_some(buffer);    // 0:
//   the peer's close_notify co_await tls->shutdown();                    // our close_notify
//
// A Stream is itself a ReadStream and a WriteStream (byte_stream.hpp): BufferedReader,
// BufferedWriter and framing work over it as over TCP.
//
// Rules:
// - One operation at a time: a second one awaited while another is pending gets Errc::busy.
//   (A TLS connection is one state machine; reading and writing from two tasks at once would
//   need a lock around it. Drive both directions from one task, or pass messages to it.)
// - Cancellation and with_timeout reach the operation on S that is waiting. A cancelled read
//   leaves the stream usable (nothing was consumed); a cancelled write, handshake or shutdown
//   leaves it unusable (part of a record may have left): close it.
// - Errors: the stream's own (connection_reset, timed_out, operation_canceled) unchanged; TLS
//   failures in the arbor.tls category (error.hpp), with OpenSSL's reason in message(). A peer
//   that ends its stream without close_notify gives Errc::truncated, never a silent end.
// Ownership: the Stream owns S, its TLS state and two buffers (33 KiB each, allocated when it is
// made); buffers passed to an operation are the caller's and must outlive its await.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "arbor/result.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/tls/context.hpp"
#include "arbor/tls/error.hpp"
#include "arbor/tls/machine.hpp"

namespace arbor::tls {

template <class S>
class Stream {
 public:
  /// A stream that will handshake as `context`'s role over `next`. `host` (clients): the
  /// server's name or IP address, checked against its certificate, sent as SNI (names only).
  static Result<Stream> make(const Context& context, S next, std::string_view host = {}) {
    auto machine = detail::Machine::make(context, host);
    if (!machine) return machine.error();
    return Stream(std::move(*machine), std::move(next));
  }

  Stream(Stream&&) noexcept = default;
  Stream& operator=(Stream&&) noexcept = default;

  /// Runs the handshake (reads and writes start it themselves if it was not run).
  Task<Result<void>> handshake() {
    auto r = co_await run(Op::handshake, {});
    if (!r) co_return r.error();
    co_return Result<void>{};
  }
  /// Reads what is available, at least one byte; 0 means the peer sent close_notify.
  Task<Result<std::size_t>> read_some(std::span<std::byte> buffer) {
    if (buffer.empty()) co_return std::size_t{0};
    co_return co_await run(Op::read, buffer);
  }
  /// Writes some of `buffer` (up to 64 KiB of it), at least one byte unless it is empty; the
  /// records carrying it have been handed to S when it returns.
  Task<Result<std::size_t>> write_some(std::span<const std::byte> buffer) {
    if (buffer.empty()) co_return std::size_t{0};
    const auto part = buffer.first(std::min(buffer.size(), kMaxWrite));
    co_return co_await run(Op::write, {const_cast<std::byte*>(part.data()), part.size()});
  }
  /// Writes all of `buffer`.
  Task<Result<void>> write_all(std::span<const std::byte> buffer) {
    while (!buffer.empty()) {
      auto n = co_await write_some(buffer);
      if (!n) co_return n.error();
      buffer = buffer.subspan(*n);
    }
    co_return Result<void>{};
  }
  /// Reads exactly buffer.size() bytes; arbor::Errc::end_of_stream if close_notify comes first.
  Task<Result<void>> read_exact(std::span<std::byte> buffer);
  /// Sends close_notify (the graceful end: the peer reads 0). It does not wait for the peer's;
  /// read until 0 for that. Writing afterwards fails. S stays open: close it, or drop the Stream.
  Task<Result<void>> shutdown() {
    auto r = co_await run(Op::shutdown, {});
    if (!r) co_return r.error();
    co_return Result<void>{};
  }

  /// After the handshake: the ALPN protocol ("" if none), the SNI name the client asked for
  /// (servers; "" if none), the version ("TLSv1.3"), whether the session was resumed.
  std::string_view alpn() const noexcept { return machine_->alpn(); }
  std::string_view server_name() const noexcept { return machine_->server_name(); }
  std::string_view version() const noexcept { return machine_->version(); }
  bool resumed() const noexcept { return machine_->resumed(); }

  /// Whether a read_some could complete without reading S (Machine::has_buffered_input):
  /// decrypted bytes not yet returned, or received records not yet decrypted. Check it before
  /// waiting for S to be readable (an idle connection parked on its socket, say): when true,
  /// read instead, as that wait could last for ever. Not while an operation is pending.
  bool has_buffered_input() const noexcept { return machine_->has_buffered_input(); }

  /// The stream underneath (closing it ends the TLS stream's pending operation).
  S& next_layer() noexcept { return next_; }
  /// OpenSSL's SSL, for what this class does not cover (owned by the stream).
  ssl_st* native_handle() const noexcept { return machine_->native_handle(); }

 private:
  using Op = detail::Machine::Op;
  using Want = detail::Machine::Want;
  static constexpr std::size_t kMaxWrite = 4 * 16 * 1024;

  Stream(std::unique_ptr<detail::Machine> machine, S next) noexcept
      : machine_(std::move(machine)), next_(std::move(next)) {}

  // Steps the machine, sending what it produced and reading what it asks for, until `op` is
  // done. A retried step passes the same `data` (OpenSSL requires it for writes).
  Task<Result<std::size_t>> run(Op op, std::span<std::byte> data) {
    // Two tasks may call at once from two workers (when_any's contestants do:
    // TlsTest.ASecondConcurrentOperationIsBusy), so the claim is one atomic exchange. Acquire
    // pairs with the release below: the winner sees the machine as the last operation left it.
    if (pending_.exchange(true, std::memory_order_acquire)) co_return make_error_code(Errc::busy);
    auto result = co_await drive(op, data);
    pending_.store(false, std::memory_order_release);
    co_return result;
  }

  Task<Result<std::size_t>> drive(Op op, std::span<std::byte> data) {
    for (;;) {
      const detail::Machine::Step step = machine_->step(op, data);
      // Records first, whatever the step says: a failed handshake's alert tells the peer why.
      auto flushed = co_await flush();
      if (step.want == Want::failed) co_return step.error;
      if (!flushed) co_return flushed.error();
      if (step.want == Want::done) co_return step.count;
      if (step.want == Want::read) {
        auto n = co_await next_.read_some(machine_->inbound_space());
        if (!n) co_return n.error();
        // The peer's end without close_notify, met by a read: truncation, said here rather
        // than by OpenSSL, which would make it fatal and send the peer a decode_error alert.
        // The stream stays able to send its own close_notify (a server draining, say).
        if (*n == 0 && op == Op::read) co_return make_error_code(Errc::truncated);
        machine_->received(*n);
      }
    }
  }

  Task<Result<void>> flush() {
    for (;;) {
      const auto out = machine_->outbound();
      if (out.empty()) break;
      auto n = co_await next_.write_some(out);
      if (!n) co_return n.error();
      machine_->sent(*n);
    }
    co_return Result<void>{};
  }

  // The one-operation-at-a-time claim. Moving a Stream while an operation is pending is not
  // allowed (the operation refers to it), so a move carries an idle flag.
  struct Claim : std::atomic<bool> {
    Claim() noexcept : std::atomic<bool>(false) {}
    Claim(Claim&&) noexcept : std::atomic<bool>(false) {}
    Claim& operator=(Claim&&) noexcept { return *this; }
  };

  std::unique_ptr<detail::Machine> machine_;
  S next_;
  Claim pending_;
};

template <class S>
Task<Result<void>> Stream<S>::read_exact(std::span<std::byte> buffer) {
  while (!buffer.empty()) {
    auto n = co_await read_some(buffer);
    if (!n) co_return n.error();
    if (*n == 0) co_return make_error_code(arbor::Errc::end_of_stream);
    buffer = buffer.subspan(*n);
  }
  co_return Result<void>{};
}

/// A client stream over `next`, handshaken: verified against `host` as the context says.
template <class S>
Task<Result<Stream<S>>> connect(const Context& context, S next, std::string_view host) {
  auto stream = Stream<S>::make(context, std::move(next), host);
  if (!stream) co_return stream.error();
  auto done = co_await stream->handshake();
  if (!done) co_return done.error();
  co_return std::move(*stream);
}

/// A server stream over `next` (an accepted connection), handshaken.
template <class S>
Task<Result<Stream<S>>> accept(const Context& context, S next) {
  auto stream = Stream<S>::make(context, std::move(next));
  if (!stream) co_return stream.error();
  auto done = co_await stream->handshake();
  if (!done) co_return done.error();
  co_return std::move(*stream);
}

}  // namespace arbor::tls
