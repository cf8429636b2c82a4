// Server: the accept loop, the sweeper, the graceful drain, and a connection's life: parked
// while idle (park(), on_readable()), a task while it has work (serve(), turn(); the steps
// are connection.hpp's), then end(). Invariant: every Watch on the list belongs to an Accepted
// that end() has not freed, so the sweeper and shutdown() may touch it under
// connections_mutex_.
#include "arbor/http/server.hpp"

#include <algorithm>
#include <new>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "arbor/internal/log.hpp"
#include "arbor/io/socket.hpp"
#include "arbor/io/timer.hpp"
#include "block_pool.hpp"
#include "connection.hpp"
#include "peer_shares.hpp"

namespace arbor::http {

Result<std::unique_ptr<Server>> Server::bind(Runtime& runtime, ServerOptions options,
                                             Handler handler) {
  if (options.max_connections == 0 || options.header_timeout.count() <= 0 ||
      options.body_timeout.count() <= 0 || options.idle_timeout.count() <= 0 ||
      options.write_timeout.count() <= 0 || options.server_name.size() > 256 || !handler)
    return std::make_error_code(std::errc::invalid_argument);
  if (options.tls != nullptr) {
#if ARBOR_HTTP_TLS
    if (options.tls->role() != tls::Role::server)
      return std::make_error_code(std::errc::invalid_argument);
#else
    return std::make_error_code(std::errc::operation_not_supported);  // built without OpenSSL
#endif
  }
  auto listener = TcpListener::bind(runtime, options.listen,
                                    {.backlog = options.backlog, .reuse_address = true});
  if (!listener) return listener.error();
  return std::unique_ptr<Server>(
      new Server(runtime, std::move(options), std::move(handler), std::move(*listener)));
}

Server::Server(Runtime& runtime, ServerOptions options, Handler handler, TcpListener listener)
    : runtime_(runtime),
      options_(std::move(options)),
      handler_(std::move(handler)),
      listener_(std::move(listener)),
      blocks_(std::make_unique<BlockPool>(Connection::block_size(options_.limits), kKeptBuffers)),
      sweeper_context_{&runtime, sweeper_stop_.get_token(), false} {
  // Deadlines are nanosecond counts (now + timeout): a longer timeout, milliseconds::max() for
  // "none" included, overflowed to one already past and the sweeper cut at its next pass
  // (HttpServerApi.TimeoutsTooLongToAddToTheClockCutNothingEarly). A century is as good as none.
  constexpr std::chrono::milliseconds kLongest = std::chrono::hours(24 * 365 * 100);
  for (auto* timeout : {&options_.header_timeout, &options_.body_timeout, &options_.idle_timeout,
                        &options_.write_timeout})
    *timeout = std::min(*timeout, kLongest);
  free_bodies_.reserve(options_.body_buffers);
  peer_shares_ = std::make_unique<PeerShares>(options_.body_buffers);
  peer_share_ =
      std::min(options_.body_buffers, options_.body_buffers_per_peer != 0
                                          ? options_.body_buffers_per_peer
                                          : std::max<std::size_t>(1, options_.body_buffers / 8));
}

std::unique_ptr<char[]> Server::take_body_buffer(const PeerKey& peer) noexcept {
  {
    std::lock_guard guard(bodies_mutex_);
    const bool room = !free_bodies_.empty() || bodies_allocated_ < options_.body_buffers;
    if (!room || !peer_shares_->try_add(peer, peer_share_)) return nullptr;
    if (!free_bodies_.empty()) {
      auto buffer = std::move(free_bodies_.back());
      free_bodies_.pop_back();
      return buffer;
    }
    ++bodies_allocated_;
  }
  // Outside the lock: a large allocation may take a while.
  std::unique_ptr<char[]> buffer(
      new (std::nothrow) char[static_cast<std::size_t>(options_.limits.max_body)]);
  if (buffer == nullptr) {
    std::lock_guard guard(bodies_mutex_);
    --bodies_allocated_;
    peer_shares_->remove(peer);
  }
  return buffer;
}

void Server::give_body_buffer(std::unique_ptr<char[]> buffer, const PeerKey& peer) noexcept {
  if (buffer == nullptr) return;
  std::lock_guard guard(bodies_mutex_);
  free_bodies_.push_back(std::move(buffer));  // within the reserved capacity: no allocation
  peer_shares_->remove(peer);
}

Server::~Server() {
  sweeper_stop_.request_stop();
}

Address Server::local_address() const {
  return *listener_.local_address();
}

ServerCounters Server::counters() const noexcept {
  ServerCounters c;
  c.connections_active = active_.load(std::memory_order_relaxed);
  c.connections_total = total_.load(std::memory_order_relaxed);
  c.connections_rejected = rejected_.load(std::memory_order_relaxed);
  c.connections_evicted = evicted_.load(std::memory_order_relaxed);
  c.requests = requests_.load(std::memory_order_relaxed);
  c.parse_errors = parse_errors_.load(std::memory_order_relaxed);
  c.timeouts = timeouts_.load(std::memory_order_relaxed);
  c.tls_handshakes_failed = tls_failures_.load(std::memory_order_relaxed);
  c.buffers_lent = blocks_->lent();
  c.buffers_kept = blocks_->kept();
  std::lock_guard guard(connections_mutex_);
  for (const Watch* w = connections_; w != nullptr; w = w->next)
    if (!w->cut && w->idle_since.load(std::memory_order_relaxed) != 0) ++c.connections_idle;
  return c;
}

void Server::enlist(Watch& w) noexcept {
  std::lock_guard guard(connections_mutex_);
  w.next = connections_;
  if (connections_ != nullptr) connections_->prev = &w;
  connections_ = &w;
  // A connection accepted as shutdown() ran gets its reads shut down here, under the same lock;
  // one that starts after the drain's deadline (spawned before it, run after it) is ended.
  if (ending_) {
    w.cut = w.drained = true;
    (void)io::shutdown(w.fd, io::ShutdownHow::both);
  } else if (draining_.load(std::memory_order_relaxed)) {
    w.drained = true;
    (void)io::shutdown(w.fd, io::ShutdownHow::read);
  }
}

void Server::delist(Watch& w) noexcept {
  std::lock_guard guard(connections_mutex_);
  if (w.prev != nullptr)
    w.prev->next = w.next;
  else
    connections_ = w.next;
  if (w.next != nullptr) w.next->prev = w.prev;
}

// Closes the longest-idle connection: its pending read ends, and its coroutine closes it. A
// request that reaches it at this very moment is lost, as with any keep-alive close (a client
// retries it on a fresh connection).
// A scan, at the limit only: the keep-alive path pays one relaxed store per read for it.
bool Server::evict_idle() noexcept {
  std::lock_guard guard(connections_mutex_);
  Watch* w = nullptr;
  std::int64_t oldest = 0;
  for (Watch* c = connections_; c != nullptr; c = c->next) {
    const std::int64_t since = c->idle_since.load(std::memory_order_relaxed);
    if (c->cut || since == 0 || (w != nullptr && since >= oldest)) continue;
    w = c;
    oldest = since;
  }
  if (w == nullptr) return false;
  w->cut = true;  // the sweeper and shutdown() leave it alone now
  evicted_.fetch_add(1, std::memory_order_relaxed);
  (void)io::shutdown(w->fd, io::ShutdownHow::both);
  return true;
}

void Server::shutdown() noexcept {
  if (draining_.exchange(true, std::memory_order_relaxed)) return;
  listener_.close();  // the pending accept completes with operation_canceled
  // Shutting down the read side ends each connection's wait for a next request: it sees end of
  // stream and closes. What a client sent before this must still be answered, and Winsock (wine
  // too) discards what has arrived unread when the read side shuts down, where POSIX keeps it
  // readable (HttpServer.SigtermAnswersRequestsInFlightThenExitsZero lost pipelined requests
  // under wine about 1 run in 3). So a connection with bytes waiting is not shut down here: it
  // reads them, answers, and shuts its reads down itself at its next idle point (serve()).
  std::lock_guard guard(connections_mutex_);
  for (Watch* c = connections_; c != nullptr; c = c->next) {
    if (c->drained || c->cut) continue;
    c->drained = true;
    if (auto waiting = io::bytes_readable(c->fd); waiting && *waiting > 0) continue;
    (void)io::shutdown(c->fd, io::ShutdownHow::read);
  }
}

Task<void> Server::run(std::chrono::milliseconds drain) {
  auto sweeper = runtime_.spawn_in(sweep(), &sweeper_context_);
  for (;;) {
    auto stream = co_await listener_.accept();
    if (!stream) {
      if (draining_.load(std::memory_order_relaxed) ||
          stream.error() == std::errc::operation_canceled ||
          stream.error() == std::errc::bad_file_descriptor)
        break;
      log::warn("http: accept failed: {}", stream.error().message());
      continue;  // TcpListener already backs off on descriptor exhaustion
    }
    // At the limit, an idle connection makes room; the one it replaces still counts in active_
    // until its coroutine ends, so each admission past the limit costs one eviction.
    if (active_.load(std::memory_order_relaxed) >= options_.max_connections && !evict_idle()) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      stream->close();  // at once: the client sees the connection end, the server stays up
      continue;
    }
    (void)stream->set_no_delay(true);
    Accepted* a = nullptr;
    try {
      a = new Accepted(*this, std::move(*stream));
    } catch (const std::bad_alloc&) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      continue;  // the stream, still ours, closes at the end of this turn of the loop
    }
    active_.fetch_add(1, std::memory_order_relaxed);
    total_.fetch_add(1, std::memory_order_relaxed);
    // It starts as a connection between requests does: idle, due idle_timeout from now. An
    // HTTPS one is busy with its handshake, due header_timeout from now (and so not evicted
    // for a newcomer: what it holds is the cut's to end).
    const std::int64_t now = io::now_ns();
    a->watch.fd = a->stream.native_handle();
    if (options_.tls == nullptr) {
      a->watch.deadline.store(now + options_.idle_timeout.count() * 1'000'000,
                              std::memory_order_relaxed);
      a->watch.idle_since.store(now, std::memory_order_relaxed);
    } else {
      a->watch.deadline.store(now + options_.header_timeout.count() * 1'000'000,
                              std::memory_order_relaxed);
    }
    enlist(a->watch);
    park(*a);
  }
  // Draining: the connections finish what they received, for up to `drain`; then the rest are
  // ended (a client that stops reading would otherwise hold its write for ever). Either way we
  // wait for every one: a connection's coroutine uses the server to its last step (its buffers
  // go back to the pool, it leaves the list), so returning first let the caller destroy the
  // server under it (HttpServerApi.RunReturnsOnlyOnceEveryConnectionHasEnded). Acquire pairs
  // with end()'s release: a connection's last use of the server comes before our return.
  // Held at the end of time when the sum would pass it: milliseconds::max() (no deadline)
  // overflowed to a deadline already past, and every connection was ended at once
  // (HttpServerApi.ADrainTooLongToAddToTheClockEndsNoConnectionEarly).
  const auto now = std::chrono::steady_clock::now();
  using Wide = std::chrono::duration<long double, std::nano>;
  const auto until =
      Wide(drain) >= Wide(std::chrono::steady_clock::time_point::max() - now)
          ? std::chrono::steady_clock::time_point::max()
          : now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(drain);
  while (active_.load(std::memory_order_acquire) > 0) {
    if (!ending_ && std::chrono::steady_clock::now() >= until) end_connections();
    if (co_await sleep_for(std::chrono::milliseconds(5))) continue;
    // Cancelled (the runtime is shutting down): end them now and let them run out.
    if (!ending_) end_connections();
    co_await yield();
  }
  sweeper_stop_.request_stop();
  co_await std::move(sweeper);
}

void Server::end_connections() noexcept {
  std::lock_guard guard(connections_mutex_);
  ending_ = true;  // and enlist() ends those that start from now on
  for (Watch* c = connections_; c != nullptr; c = c->next) {
    if (c->cut) continue;
    c->cut = true;
    (void)io::shutdown(c->fd, io::ShutdownHow::both);  // ends its pending read or write
  }
}

// After a spike of connections ends, the heap holds their freed coroutine frames: free to
// reuse, but resident, since glibc returns only the top of each arena by itself. Once the
// connection count has fallen by kSpikeEnded and to half its peak, the sweeper asks glibc to
// give every free page back (one walk of the arenas, milliseconds, once per spike).
void Server::give_memory_back(std::uint64_t& peak) noexcept {
  constexpr std::uint64_t kSpikeEnded = 1024;
  const std::uint64_t active = active_.load(std::memory_order_relaxed);
  if (active > peak) peak = active;
  if (peak - active < kSpikeEnded || active > peak / 2) return;
  peak = active;
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

Task<void> Server::sweep() {
  const auto shortest = std::min({options_.header_timeout, options_.body_timeout,
                                  options_.idle_timeout, options_.write_timeout});
  const auto period = std::clamp<std::chrono::milliseconds>(
      shortest / 4, std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
  std::uint64_t peak = 0;
  for (;;) {
    if (!co_await sleep_for(period)) co_return;  // cancelled: the server or runtime stops
    give_memory_back(peak);
    const std::int64_t now = io::now_ns();
    std::lock_guard guard(connections_mutex_);
    for (Watch* c = connections_; c != nullptr; c = c->next) {
      if (c->cut || c->deadline.load(std::memory_order_relaxed) > now) continue;
      c->cut = true;
      timeouts_.fetch_add(1, std::memory_order_relaxed);
      (void)io::shutdown(c->fd, io::ShutdownHow::both);  // ends its pending read or write
    }
  }
}

void Server::park(Accepted& a) noexcept {
  a.wait.complete = &on_readable;
  a.wait.context = &a;
  if (!a.stream.start_readable(a.wait)) return;  // pending: `a` is on_readable's from here on
  on_readable(a.wait, a.wait.result);            // finished at once: a wake all the same
}

// The wait's completion, on a worker: the connection's next turn runs as a task of its own.
void Server::on_readable(io::Operation& op, std::int64_t result) noexcept {
  auto& a = *static_cast<Accepted*>(op.context);
  a.woke = result;
  Server& server = a.server;
  try {
    server.runtime_.spawn(server.serve(a)).detach();
  } catch (const std::bad_alloc&) {
    server.end(a);  // no memory for the turn's frames: the connection closes
  }
}

// A wake: one turn, then park again (idle) or end. turn()'s frame, with the request state, is
// gone before the park: once parked, `a` may be woken, served and ended on another worker at
// once, and this frame must not touch it or the server (which end() may let go) after that.
Task<void> Server::serve(Accepted& a) {
  // A local, not `if (co_await ...)`: GCC 12 miscompiles that shape (docs/guide.md, case 4).
  bool idle = false;
  try {
    idle = co_await turn(a);
  } catch (...) {
    // No memory for a frame of the turn (turn()'s own, or a write's): the connection closes.
    // Letting it leave this task would leave `a` neither parked nor ended: its socket open,
    // its watch listed, active_ never back to 0, and run() waiting for it for ever
    // (HttpServerAllocation.NoMemoryForAWakesTurnClosesTheConnection).
    idle = false;
  }
  if (idle)
    park(a);
  else
    end(a);
}

Task<bool> Server::turn(Accepted& a) {
  if (options_.tls != nullptr) {
#if ARBOR_HTTP_TLS
    if (a.tls == nullptr) {  // the first wake: the handshake, holding no buffer
      bool done = false;
      if (a.woke >= 0) done = co_await handshake(a);
      if (!done) co_return false;
      // Park until the request comes, unless it came with the handshake's last records.
      if (!a.tls->has_buffered_input()) {
        // Draining: shutdown() left this one's reads open (its ClientHello was waiting) and
        // will not come back to it; parked, it would hold run() to the drain's deadline.
        if (draining_.load(std::memory_order_relaxed)) {
          a.watch.deadline.store(io::now_ns() + options_.write_timeout.count() * 1'000'000,
                                 std::memory_order_relaxed);
          (void)co_await a.tls->shutdown();  // close_notify: a close of our choosing
          co_return false;
        }
        co_return true;
      }
    }
#endif
  }
  Connection c(*this, a);
  Connection::ReadNow now = Connection::ReadNow::ended;
  if (c.tls())
    now = co_await c.wake_tls(a.woke);
  else
    now = c.wake(a.woke);
  switch (now) {
    case Connection::ReadNow::got:
      break;
    case Connection::ReadNow::nothing:
      co_return true;  // stale readiness: park again, with the same deadline
    case Connection::ReadNow::ended:
      co_return false;
  }
  for (;;) {
    while (c.parse())
      while (!c.respond())  // no room for the reply: an early write, then it goes on
        if (!co_await c.write()) co_return false;
    if (c.has_output() && !co_await c.write()) co_return false;  // one read's responses at once
    if (c.closing()) break;
    c.deadline();
    if (c.idle() && !c.tls_buffered()) {
      // Draining: what had arrived when shutdown() ran is answered by now (it left this
      // connection readable for it, or shut its reads down), so the park below is to see the
      // end of stream, not another request. An HTTPS one ends here, with close_notify: its
      // end of stream would be a truncation to the client.
      if (draining_.load(std::memory_order_relaxed)) {
        if (c.tls()) {
          co_await c.close_notify();
          co_return false;
        }
        c.shut_down_reads();
      }
      co_return true;  // park, holding nothing (c gives its buffers back)
    }
    // Idle with TLS input buffered (see server.hpp): read on, as a wake would.
    bool got = false;
    if (c.tls())
      got = co_await c.read_tls();
    else
      got = co_await c.read();
    if (!got) co_return false;  // peer closed, reset, timed out, drained or evicted
    c.busy();
  }
  if (c.tls()) co_await c.close_notify();  // a close of our choosing: tell the client
  if (c.must_linger()) co_await c.linger();
  co_return false;
}

Task<bool> Server::handshake(Accepted& a) {
#if ARBOR_HTTP_TLS
  auto stream = TlsStream::make(*options_.tls, SocketRef{&a.stream});
  if (!stream) {
    tls_failures_.fetch_add(1, std::memory_order_relaxed);
    log::debug("http: TLS stream not made: {}", stream.error().message());
    co_return false;
  }
  // The deadline (header_timeout from the accept) stands: the sweeper cuts a stalled one.
  auto done = co_await stream->handshake();
  if (!done) {
    tls_failures_.fetch_add(1, std::memory_order_relaxed);
    log::debug("http: TLS handshake failed: {}", done.error().message());
    co_return false;
  }
  a.tls = std::make_unique<TlsStream>(std::move(*stream));
  const std::int64_t now = io::now_ns();
  a.watch.deadline.store(now + options_.idle_timeout.count() * 1'000'000,
                         std::memory_order_relaxed);
  a.watch.idle_since.store(now, std::memory_order_relaxed);
  co_return true;
#else
  (void)a;
  co_return false;
#endif
}

void Server::end(Accepted& a) noexcept {
  delist(a.watch);
  delete &a;  // closes the socket
  // Release pairs with run()'s acquire: this connection's last use of the server comes first.
  active_.fetch_sub(1, std::memory_order_release);
}

}  // namespace arbor::http
