// tls::detail::Machine: one TLS connection with no IO of its own (sans-IO). Stream<S> moves
// bytes between it and a byte stream; nothing else should need it.
//
// The choice, and why: OpenSSL reads and writes records through a custom BIO over two buffers
// this machine owns (inbound: ciphertext the socket read; outbound: records to send). The
// stream reads from the socket straight into the inbound buffer's free space and writes to the
// socket straight from the outbound buffer, so ciphertext is copied once each way, into or out
// of OpenSSL's record buffer, which is as few as the BIO interface allows (a BIO that called
// the socket itself cannot work on a completion engine, where a read is a submitted operation,
// not a call). A memory BIO (BIO_s_mem) would copy the same but grow by reallocation; a BIO
// pair would add a third buffer. Both buffers are allocated once, with the machine: steady
// state allocates nothing (tests/tls/tls_alloc_test.cpp counts).
//
// Invariant: step() runs OpenSSL on the calling thread and reads its error queue before
// returning, so a task that moves between workers across awaits never sees another's errors.
// After a step fails, every later step fails with Errc::not_usable.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "arbor/result.hpp"
#include "arbor/tls/context.hpp"

struct ssl_st;  // OpenSSL's SSL

namespace arbor::tls::detail {

class Machine {
 public:
  enum class Op { handshake, read, write, shutdown };
  enum class Want {
    done,   // finished: `count` bytes (read: 0 = the peer's close_notify)
    read,   // needs more ciphertext: fill inbound_space(), then received()
    write,  // outbound() is full: send it, then sent(), then step again
    failed  // `error` says why
  };
  struct Step {
    Want want;
    std::size_t count = 0;
    std::error_code error;
  };

  /// A machine for `context`'s role. `host` (client): the name sent as SNI, checked against
  /// the certificate when the context verifies, and the resumption key; an IP address is
  /// checked as one and not sent as SNI.
  static Result<std::unique_ptr<Machine>> make(const Context& context, std::string_view host);
  ~Machine();
  Machine(const Machine&) = delete;
  Machine& operator=(const Machine&) = delete;

  /// Advances `op` (data: what to read into or write from). Outbound records may be waiting
  /// whatever it returns: the caller sends outbound() before acting on the result.
  Step step(Op op, std::span<std::byte> data) noexcept;

  std::span<std::byte> inbound_space() noexcept;
  /// `n` bytes arrived in inbound_space(); 0 means the peer ended its stream.
  void received(std::size_t n) noexcept;
  std::span<const std::byte> outbound() const noexcept {
    return {buffer_.get() + kInbound + out_begin_, out_end_ - out_begin_};
  }
  void sent(std::size_t n) noexcept;
  /// Whether a read could make progress without more bytes from the stream: ciphertext
  /// received but not yet taken by OpenSSL (a whole or partial record), or plaintext OpenSSL
  /// has decrypted and not yet returned (a read smaller than the record). A caller that waits
  /// for the stream's readability first must not, when this is true: the bytes it waits for
  /// may already be here, and the wait may never end.
  bool has_buffered_input() const noexcept;

  /// The protocol ALPN chose ("" if none), the SNI name a server was asked for ("" if none),
  /// the version ("TLSv1.3"), whether the session was resumed.
  std::string_view alpn() const noexcept;
  std::string_view server_name() const noexcept;
  std::string_view version() const noexcept;
  bool resumed() const noexcept;
  ssl_st* native_handle() const noexcept { return ssl_; }
  const std::string& host() const noexcept { return host_; }

  /// Room for one full record (16 KiB and the largest overhead) twice over, each way: a read
  /// takes up to two records a system call, a write sends up to two.
  static constexpr std::size_t kRecord = 16 * 1024 + 256;
  static constexpr std::size_t kInbound = 2 * kRecord;
  static constexpr std::size_t kOutbound = 2 * kRecord;

 private:
  Machine() = default;
  friend struct BioAccess;
  std::size_t bio_read(std::byte* out, std::size_t n) noexcept;
  std::size_t bio_write(const std::byte* in, std::size_t n) noexcept;
  std::error_code classify(int ret) noexcept;

  ssl_st* ssl_ = nullptr;
  std::shared_ptr<Context::State> context_;  // keeps the SSL_CTX's callbacks' state alive
  std::string host_;
  std::unique_ptr<std::byte[]> buffer_;  // inbound [0, kInbound), outbound after it
  std::size_t in_begin_ = 0, in_end_ = 0;
  std::size_t out_begin_ = 0, out_end_ = 0;
  bool eof_ = false;     // the peer ended its byte stream
  bool broken_ = false;  // a step failed: nothing more
};

}  // namespace arbor::tls::detail
