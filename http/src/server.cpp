#include "arbor/http/server.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

#include "arbor/http/date.hpp"
#include "arbor/io/log.hpp"
#include "arbor/io/socket.hpp"
#include "arbor/io/timer.hpp"

namespace arbor::http {
namespace {

constexpr std::size_t kOutCapacity = 16 * 1024;
constexpr std::size_t kScratchCapacity = 16 * 1024;
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kLingerNs = 2'000'000'000;  // reading leftovers after an error reply
constexpr std::size_t kLingerBytes = 1 << 20;

// A fixed-capacity byte sink; callers check room() first.
struct Output {
  char* data;
  std::size_t capacity;
  std::size_t size = 0;

  std::size_t room() const noexcept { return capacity - size; }
  void put(std::string_view s) noexcept {
    std::memcpy(data + size, s.data(), s.size());
    size += s.size();
  }
  void put_number(std::uint64_t n) noexcept {
    const auto r = std::to_chars(data + size, data + capacity, n);
    size = static_cast<std::size_t>(r.ptr - data);
  }
};

// An upper bound on the head write_head() produces.
std::size_t head_bound(const Reply& r, std::string_view server_name) noexcept {
  return 160 + server_name.size() + r.content_type.size() + r.allow.size() + kDateSize;
}

void write_head(Output& out, const Reply& r, std::size_t body_size, bool keep_alive,
                int version_minor, std::string_view server_name, std::string_view date) noexcept {
  out.put("HTTP/1.1 ");
  out.put_number(static_cast<std::uint64_t>(r.status));
  out.put(" ");
  out.put(reason_phrase(r.status));
  out.put("\r\nServer: ");
  out.put(server_name);
  out.put("\r\nDate: ");
  out.put(date);
  if (!r.content_type.empty()) {
    out.put("\r\nContent-Type: ");
    out.put(r.content_type);
  }
  out.put("\r\nContent-Length: ");
  out.put_number(body_size);
  if (!r.allow.empty()) {
    out.put("\r\nAllow: ");
    out.put(r.allow);
  }
  if (!keep_alive)
    out.put("\r\nConnection: close");
  else if (version_minor == 0)
    out.put("\r\nConnection: keep-alive");
  out.put("\r\n\r\n");
}

std::span<const std::byte> bytes(const char* p, std::size_t n) noexcept {
  return {reinterpret_cast<const std::byte*>(p), n};
}

}  // namespace

// One live connection, as the sweeper sees it. Lives in the connection's coroutine frame.
struct Server::Connection {
  Connection* prev = nullptr;
  Connection* next = nullptr;
  io::Handle fd = io::kInvalidHandle;
  std::atomic<std::int64_t> deadline{kNever};
  bool cut = false;      // shut down by the sweeper (guarded by connections_mutex_)
  bool drained = false;  // reads shut down by shutdown() (guarded by connections_mutex_)
};

Result<std::unique_ptr<Server>> Server::bind(Runtime& runtime, ServerOptions options,
                                             Handler handler) {
  if (options.max_connections == 0 || options.header_timeout.count() <= 0 ||
      options.idle_timeout.count() <= 0 || options.server_name.size() > 256 || !handler)
    return std::make_error_code(std::errc::invalid_argument);
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
      sweeper_context_{&runtime, sweeper_stop_.get_token(), false} {}

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
  c.requests = requests_.load(std::memory_order_relaxed);
  c.parse_errors = parse_errors_.load(std::memory_order_relaxed);
  c.timeouts = timeouts_.load(std::memory_order_relaxed);
  return c;
}

void Server::enlist(Connection& c) noexcept {
  std::lock_guard guard(connections_mutex_);
  c.next = connections_;
  if (connections_ != nullptr) connections_->prev = &c;
  connections_ = &c;
  // A connection accepted as shutdown() ran gets its reads shut down here, under the same lock.
  if (draining_.load(std::memory_order_relaxed)) {
    c.drained = true;
    (void)io::shutdown(c.fd, io::ShutdownHow::read);
  }
}

void Server::delist(Connection& c) noexcept {
  std::lock_guard guard(connections_mutex_);
  if (c.prev != nullptr)
    c.prev->next = c.next;
  else
    connections_ = c.next;
  if (c.next != nullptr) c.next->prev = c.prev;
}

void Server::shutdown() noexcept {
  if (draining_.exchange(true, std::memory_order_relaxed)) return;
  listener_.close();  // the pending accept completes with operation_canceled
  // Shutting down the read side lets each connection read what its client already sent,
  // then see end of stream: it answers every complete request and closes.
  std::lock_guard guard(connections_mutex_);
  for (Connection* c = connections_; c != nullptr; c = c->next) {
    if (c->drained || c->cut) continue;
    c->drained = true;
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
      io::log::warn("http: accept failed: {}", stream.error().message());
      continue;  // TcpListener already backs off on descriptor exhaustion
    }
    if (active_.load(std::memory_order_relaxed) >= options_.max_connections) {
      rejected_.fetch_add(1, std::memory_order_relaxed);
      stream->close();  // at once: the client sees the connection end, the server stays up
      continue;
    }
    (void)stream->set_no_delay(true);
    active_.fetch_add(1, std::memory_order_relaxed);
    total_.fetch_add(1, std::memory_order_relaxed);
    runtime_.spawn(serve(std::move(*stream))).detach();
  }
  // Draining: wait for the connections to finish, bounded by `drain`.
  const auto until = std::chrono::steady_clock::now() + drain;
  while (active_.load(std::memory_order_acquire) > 0 && std::chrono::steady_clock::now() < until)
    if (!co_await sleep_for(std::chrono::milliseconds(5))) break;
  sweeper_stop_.request_stop();
  co_await std::move(sweeper);
}

Task<void> Server::sweep() {
  const auto shortest = std::min(options_.header_timeout, options_.idle_timeout);
  const auto period = std::clamp<std::chrono::milliseconds>(
      shortest / 4, std::chrono::milliseconds(5), std::chrono::milliseconds(1000));
  for (;;) {
    if (!co_await sleep_for(period)) co_return;  // cancelled: the server or runtime stops
    const std::int64_t now = io::now_ns();
    std::lock_guard guard(connections_mutex_);
    for (Connection* c = connections_; c != nullptr; c = c->next) {
      if (c->cut || c->deadline.load(std::memory_order_relaxed) > now) continue;
      c->cut = true;
      timeouts_.fetch_add(1, std::memory_order_relaxed);
      (void)io::shutdown(c->fd, io::ShutdownHow::both);  // ends its pending read or write
    }
  }
}

Task<void> Server::serve(TcpStream stream) {
  Connection self;
  self.fd = stream.native_handle();
  enlist(self);
  struct Leave {
    Server& server;
    Connection& self;
    ~Leave() {
      server.delist(self);
      server.active_.fetch_sub(1, std::memory_order_release);
    }
  } leave{*this, self};

  const Limits& limits = options_.limits;
  const std::size_t in_capacity = std::max<std::size_t>(limits.max_head + 1024, 16 * 1024);
  const std::unique_ptr<char[]> memory(
      new (std::nothrow) char[in_capacity + kOutCapacity + kScratchCapacity]);
  if (!memory) co_return;
  char* const in = memory.get();
  Output out{in + in_capacity, kOutCapacity};
  const std::span<char> scratch(in + in_capacity + kOutCapacity, kScratchCapacity);
  const std::int64_t header_ns = options_.header_timeout.count() * 1'000'000;
  const std::int64_t idle_ns = options_.idle_timeout.count() * 1'000'000;

  RequestParser parser(limits);
  std::size_t begin = 0, end = 0;
  std::uint64_t discard = 0;         // body bytes still to skip
  std::int64_t request_started = 0;  // when the current partial request began (0: none)
  bool closing = false;              // answer what is queued, then close
  bool failed = false;               // an error reply: linger before closing

  for (;;) {
    std::uint64_t answered = 0;
    // One clock read per batch, not per response. Copied, not viewed: the thread-local cache
    // belongs to the thread we are on now, and a write below may resume us on another.
    char date[kDateSize];
    std::memcpy(date, http_date().data(), kDateSize);
    while (!closing) {
      if (discard > 0) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(discard, end - begin));
        begin += n;
        discard -= n;
        if (discard > 0) break;
      }
      if (begin == end) break;
      const auto status = parser.parse({in + begin, end - begin});
      if (status == RequestParser::Status::incomplete) break;
      Reply reply;
      bool keep_alive = false;
      int version_minor = 1;
      bool head_only = false;
      if (status == RequestParser::Status::error) {
        parse_errors_.fetch_add(1, std::memory_order_relaxed);
        reply.status = parser.error_status();
        reply.body = reason_phrase(reply.status);
        closing = failed = true;
      } else {
        const Request& request = parser.request();
        keep_alive = request.keep_alive;
        version_minor = request.version_minor;
        head_only = request.method == "HEAD";
        try {
          reply = handler_(request, scratch);
        } catch (...) {  // a handler bug costs its request, not the connection's neighbours
          reply = {500, "text/plain", reason_phrase(500), {}};
        }
        begin += parser.head_size();
        discard = request.content_length;
        request_started = 0;
        closing = !keep_alive;
        parser.reset();
      }
      ++answered;
      if (head_bound(reply, options_.server_name) > kOutCapacity / 2)  // absurd header values
        reply = {500, "text/plain", reason_phrase(500), {}};
      const std::size_t body_size = head_only ? 0 : reply.body.size();
      const std::size_t bound = head_bound(reply, options_.server_name);
      if (out.room() < bound + body_size && out.size > 0) {
        if (!co_await stream.write_all(bytes(out.data, out.size))) co_return;
        out.size = 0;
      }
      write_head(out, reply, reply.body.size(), keep_alive, version_minor, options_.server_name,
                 {date, kDateSize});
      if (out.room() >= body_size) {
        out.put(reply.body.substr(0, body_size));
      } else {  // a body larger than the buffer goes out straight from where it is
        const io::ConstBuffer parts[2] = {{out.data, out.size}, {reply.body.data(), body_size}};
        if (!co_await stream.write_all(std::span<const io::ConstBuffer>(parts))) co_return;
        out.size = 0;
      }
    }
    if (answered > 0) requests_.fetch_add(answered, std::memory_order_relaxed);
    if (out.size > 0) {  // the responses to one read, in one write
      if (!co_await stream.write_all(bytes(out.data, out.size))) co_return;
      out.size = 0;
    }
    if (closing) break;

    if (begin == end) {
      begin = end = 0;
    } else if (begin > 0) {
      std::memmove(in, in + begin, end - begin);
      end -= begin;
      begin = 0;
    }
    const std::int64_t now = io::now_ns();
    if (discard > 0) {
      self.deadline.store(now + idle_ns, std::memory_order_relaxed);
    } else if (end > 0) {
      if (request_started == 0) request_started = now;
      self.deadline.store(request_started + header_ns, std::memory_order_relaxed);
    } else {
      self.deadline.store(now + idle_ns, std::memory_order_relaxed);
    }
    auto n =
        co_await stream.read_some(std::as_writable_bytes(std::span(in + end, in_capacity - end)));
    if (!n || *n == 0) co_return;  // peer closed, reset, timed out or drained
    end += *n;
  }

  if (failed) {
    // Closing with unread request bytes makes the kernel send a reset, which can destroy the
    // error reply before the client reads it. Half-close and read what is left first (bounded
    // in bytes, and in time by the sweeper).
    (void)stream.shutdown_write();
    self.deadline.store(io::now_ns() + kLingerNs, std::memory_order_relaxed);
    std::size_t skipped = 0;
    while (skipped < kLingerBytes) {
      auto n = co_await stream.read_some(std::as_writable_bytes(std::span(in, in_capacity)));
      if (!n || *n == 0) break;
      skipped += *n;
    }
  }
}

}  // namespace arbor::http
