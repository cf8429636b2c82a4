// Server: HTTP/1.1 on arbor's sockets. The application supplies one Handler; the server owns
// connections, parsing, keep-alive, pipelining, limits, timeouts and graceful shutdown.
//
//   auto server = http::Server::bind(rt, options, [](const http::Request& r, std::span<char>) {
//     return http::Reply{.content_type = "text/plain", .body = "hi"};
//   });
//   co_await (*server)->run();          // until shutdown()
//
// Per connection: one buffer for requests, one for responses, lent from a pool shared by the
// server's connections while the connection has a request in hand, and given back when it goes
// idle, so a waiting keep-alive connection holds only about 1 KB of its own (docs/http.md has
// the figures). Nothing is allocated per request: the pool keeps kKeptBuffers free blocks for
// reuse and gives the rest back to the OS, so memory taken in a spike is returned after it. A
// request body is read whole before the handler runs (Request::body): in the request buffer if it
// fits there with its head, else in one of ServerOptions::body_buffers buffers the server shares
// among its connections. Every complete request in a read is answered in order, and the responses
// to one read go out in one write. After an error response (400, 413, 414, 431, 501, 505) or a
// "Connection: close" the connection closes once the response is out.
//
// Timeouts are enforced by one sweeper task per server rather than a timer per read: each
// connection publishes its deadline (a relaxed atomic store per read and per write), and the
// sweeper shuts down the socket of any connection past it, which ends that connection's pending
// read or write. Each timeout bounds one phase, and only while the connection is in it:
//   header_timeout  a request head must arrive in full within it of its first byte (a client
//                   trickling one byte a second is cut off);
//   body_timeout    a request body must arrive in full within it of its head, and with no gap
//                   between reads longer than idle_timeout (a slow upload cannot hold a body
//                   buffer for ever);
//   idle_timeout    a keep-alive connection with nothing of a request received is closed
//                   after it;
//   write_timeout   a write that makes no progress for this long (a client that stopped
//                   reading its replies) ends the connection. A client that reads, however
//                   slowly, is never cut while its replies are written: the write's deadline
//                   moves with every chunk the kernel takes.
//
// At max_connections a new connection is admitted by closing the connection that has been
// idle longest (waiting for its first or next request with nothing of one received: no partial
// head, no body in progress, no reply being written); only when none is idle is the new one
// closed at once. A connection marks itself idle with one relaxed store of the time (no lock,
// no shared counter on the keep-alive path); the eviction scans the connection list, under the
// mutex the sweeper takes anyway, only at the limit.
//
// HTTPS (ServerOptions::tls): every accepted connection runs a TLS server handshake at its
// first wake, then the same HTTP/1.1 inside tls::Stream. The handshake is bounded by
// header_timeout from the accept (a client that connects and sends nothing, or stalls
// mid-handshake, is cut by the sweeper like a slowloris); a handshake that fails (a client
// speaking plain HTTP, say) closes the connection, counted in tls_handshakes_failed. An idle
// HTTPS connection is parked as a plain one is, with no task, except when its TLS layer holds
// input already (decrypted bytes not yet read, or a record received whole or in part): that
// input would never make the socket readable again, so the connection reads on instead. Its
// TLS state stays with it while idle: about 70 KB (tls::Stream's two record buffers, 33 KiB
// each, and OpenSSL's SSL), against about 1 KB for a plain one, since OpenSSL keeps no
// session state that could be set aside and rebuilt. A connection that closes by its own
// choice (Connection: close, an error reply, the drain) sends close_notify first, within
// write_timeout; one cut by a timeout, an eviction or an error is closed at once. A peer that
// ends without close_notify is a connection that ended, nothing more. On the plain path the
// cost of all this is one test of a pointer per wake, per read and per write, not per byte.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "arbor/arbor.hpp"
#include "arbor/http/request_parser.hpp"

namespace arbor::tls {
class Context;  // tls/include/arbor/tls/context.hpp, in builds with OpenSSL (arbor::tls)
}

namespace arbor::http {

class BlockPool;
class PeerShares;
struct PeerKey;

struct ServerOptions {
  Address listen = Address::loopback_v4(8080);
  Limits limits;
  // Beyond it, the longest-idle connection is closed to admit a new one; with none idle, the
  // new one is accepted and closed at once.
  std::size_t max_connections = 10'000;
  // The four timeouts (above); milliseconds::max() is none (held at a century).
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds idle_timeout{60'000};
  std::chrono::milliseconds write_timeout{60'000};
  std::string server_name = "arbor";  // at most 256 bytes
  // A request body that does not fit in the connection's input buffer (with its head) is read
  // into one of at most this many body buffers of limits.max_body bytes each, shared by the
  // server's connections: allocated when first needed, then reused, never freed before the
  // server. With none free the request gets a 503 (0: such bodies always do).
  std::size_t body_buffers = 64;
  // At most this many of the body buffers go to connections from one peer (an IPv4 address or
  // an IPv6 /64, whatever its ports), so one host's slow uploads cannot take them all; a peer at
  // its share gets a 503 like a server with none free. 0: body_buffers / 8, at least 1.
  std::size_t body_buffers_per_peer = 0;
  int backlog = 4096;
  // HTTPS: a server context (its certificate chain and key; ALPN "http/1.1" for clients that
  // negotiate it) every connection handshakes with, shared by them and not to be changed once
  // bind() has it; the server holds a reference until it is destroyed. Null: plain HTTP. A
  // build without OpenSSL (no arbor::tls) has the member but refuses it: bind() fails with
  // std::errc::operation_not_supported; a client context fails with invalid_argument.
  std::shared_ptr<const tls::Context> tls;
};

/// What a handler answers. The views must stay valid until the handler's next call on this
/// connection (point them at constants, or at the scratch buffer the handler is given). Header
/// values (content_type, allow) longer than a few KiB turn the reply into a 500.
struct Reply {
  int status = 200;
  std::string_view content_type = "text/plain";
  std::string_view body;
  std::string_view allow;  // the Allow header, for 405
};

/// Called for every request, once its body (request.body) has arrived in full, on a worker
/// thread; may run concurrently for different connections. request's views, the body's too,
/// stay valid until the reply is sent (a reply may point into them, an echo say). An exception
/// it throws becomes a 500 for that request. `scratch`
/// (ServerOptions-independent, 16 KiB) is this connection's to use for the reply body.
using Handler = std::function<Reply(const Request& request, std::span<char> scratch)>;

struct ServerCounters {
  std::uint64_t connections_active = 0;
  std::uint64_t connections_idle = 0;  // waiting for a request, with nothing of one received
  std::uint64_t connections_total = 0;
  std::uint64_t connections_rejected = 0;  // over max_connections, none idle to close
  std::uint64_t connections_evicted = 0;   // idle ones closed to admit a new one
  std::uint64_t requests = 0;
  std::uint64_t parse_errors = 0;  // requests answered with 4xx/5xx by the parser
  std::uint64_t timeouts = 0;      // connections cut off by any of the four timeouts
  // HTTPS: handshakes that failed (a client that does not speak TLS, refuses the certificate,
  // offers no shared ALPN protocol, or is cut by header_timeout, which timeouts counts too).
  std::uint64_t tls_handshakes_failed = 0;
  // Connections holding a working buffer now (one with a request in hand); an idle one holds
  // none. And the buffers kept free for reuse (at most kKeptBuffers).
  std::uint64_t buffers_lent = 0;
  std::uint64_t buffers_kept = 0;
};

class Server {
 public:
  /// Free connection buffers (about 52 KB each with the default limits) the pool keeps.
  static constexpr std::size_t kKeptBuffers = 32;

  /// Binds and listens. Errors: the address is in use, not available, etc.
  static Result<std::unique_ptr<Server>> bind(Runtime& runtime, ServerOptions options,
                                              Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Address local_address() const;
  const ServerOptions& options() const noexcept { return options_; }

  /// Accepts until shutdown(); then lets the connections answer what they received for up to
  /// `drain`, ends those still open, and completes once every connection has ended (its task
  /// no longer uses the server). The server may be destroyed once it has completed, not before.
  Task<void> run(std::chrono::milliseconds drain = std::chrono::seconds(5));

  /// Stops accepting, and lets each connection answer the requests it has fully received,
  /// then close. Thread-safe; may be called from any thread, more than once.
  void shutdown() noexcept;

  /// A snapshot; takes the connections mutex and walks the connections (for the idle count).
  ServerCounters counters() const noexcept;

 private:
  class Connection;
  struct Watch;
  struct Accepted;
  Server(Runtime& runtime, ServerOptions options, Handler handler, TcpListener listener);
  // A connection's life: parked (no task) while idle; each wake runs serve(), whose turn()
  // holds the request state until the connection is idle again (parked anew) or done (ended).
  void park(Accepted& a) noexcept;
  static void on_readable(io::Operation& op, std::int64_t result) noexcept;
  Task<void> serve(Accepted& a);
  Task<bool> turn(Accepted& a);
  // HTTPS, at a connection's first wake: the server handshake; true once a.tls holds the
  // handshaken stream (and the connection is idle, due idle_timeout from now).
  Task<bool> handshake(Accepted& a);
  void end(Accepted& a) noexcept;
  Task<void> sweep();
  void give_memory_back(std::uint64_t& peak) noexcept;
  void enlist(Watch& w) noexcept;
  void delist(Watch& w) noexcept;
  bool evict_idle() noexcept;
  // Cuts every connection left (both directions shut down) and marks the server ending.
  void end_connections() noexcept;
  // Null if none is free or `peer` holds its share. Each buffer taken is given back with the
  // same peer.
  std::unique_ptr<char[]> take_body_buffer(const PeerKey& peer) noexcept;
  void give_body_buffer(std::unique_ptr<char[]> buffer, const PeerKey& peer) noexcept;

  Runtime& runtime_;
  ServerOptions options_;
  Handler handler_;
  TcpListener listener_;
  std::atomic<bool> draining_{false};
  std::atomic<std::uint64_t> active_{0};
  std::atomic<std::uint64_t> total_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> evicted_{0};
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> parse_errors_{0};
  std::atomic<std::uint64_t> timeouts_{0};
  std::atomic<std::uint64_t> tls_failures_{0};
  mutable std::mutex
      connections_mutex_;  // guards the lists below and each listed socket's liveness
  Watch* connections_ = nullptr;
  // The drain's deadline passed: written by run() under connections_mutex_, which enlist() reads
  // it under (run() reads its own writes without it).
  bool ending_ = false;
  std::unique_ptr<BlockPool> blocks_;                 // the connections' working buffers
  std::mutex bodies_mutex_;                           // guards the two below
  std::vector<std::unique_ptr<char[]>> free_bodies_;  // capacity body_buffers: never grows
  std::size_t bodies_allocated_ = 0;
  std::unique_ptr<PeerShares> peer_shares_;  // who holds the buffers not free
  std::size_t peer_share_ = 1;               // the most one peer may hold
  std::stop_source sweeper_stop_;
  TaskContext sweeper_context_;
};

}  // namespace arbor::http
