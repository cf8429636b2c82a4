// The steps of one connection. Each keeps connection.hpp's invariant: consumed input leaves
// [begin_, end_) only once its request is answered, and a response enters the output buffer
// whole, after every response to an earlier request.
#include "connection.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <utility>

#include "arbor/io/socket.hpp"
#include "arbor/io/timer.hpp"
#include "block_pool.hpp"

namespace arbor::http {
namespace {

// Whether an Expect field value's list (RFC 9110 §10.1.1, case-insensitive) has 100-continue.
bool expects_continue(std::string_view value) noexcept {
  constexpr std::string_view kWanted = "100-continue";
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    std::string_view m = value.substr(0, comma);
    while (!m.empty() && (m.front() == ' ' || m.front() == '\t'))
      m.remove_prefix(1);
    while (!m.empty() && (m.back() == ' ' || m.back() == '\t'))
      m.remove_suffix(1);
    if (m.size() == kWanted.size() &&
        std::equal(m.begin(), m.end(), kWanted.begin(),
                   [](char a, char b) { return (a >= 'A' && a <= 'Z' ? a - 'A' + 'a' : a) == b; }))
      return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

constexpr std::size_t kOutCapacity = 16 * 1024;
constexpr std::size_t kScratchCapacity = 16 * 1024;
// Lingering before a close (linger()), after nginx's lingering_close: a client still sending
// gets kLingerGapNs between reads and kLingerTotalNs in all, and beyond the body it declared,
// kLingerBytes more are dropped. The time bounds keep a client that never stops from holding
// the connection; the byte bound keeps a fast one from doing so within them.
constexpr std::int64_t kLingerGapNs = 2'000'000'000;
constexpr std::int64_t kLingerTotalNs = 10'000'000'000;
constexpr std::uint64_t kLingerBytes = 8 << 20;

std::size_t in_capacity(const Limits& limits) noexcept {
  return std::max<std::size_t>(limits.max_head + 1024, 16 * 1024);
}

// An upper bound on the head put_head() produces.
std::size_t head_bound(const Reply& r, std::string_view server_name) noexcept {
  return 160 + server_name.size() + r.content_type.size() + r.allow.size() + kDateSize;
}

std::size_t field_count(const Limits& limits) noexcept {
  return std::clamp<std::size_t>(limits.max_fields, 1, RequestParser::kMaxFields);
}

// Fields first: the block is page-aligned, so it is aligned for them; the bytes follow.
constexpr std::size_t field_bytes(std::size_t count) noexcept {
  static_assert(alignof(Field) <= alignof(std::max_align_t));
  return count * sizeof(Field);
}

Reply internal_error() noexcept {
  return {500, "text/plain", reason_phrase(500), {}};
}

std::span<const std::byte> bytes(const char* p, std::size_t n) noexcept {
  return {reinterpret_cast<const std::byte*>(p), n};
}

}  // namespace

void Server::Connection::Output::put(std::string_view s) noexcept {
  std::memcpy(data + size, s.data(), s.size());
  size += s.size();
}

void Server::Connection::Output::put_number(std::uint64_t n) noexcept {
  const auto r = std::to_chars(data + size, data + capacity, n);
  size = static_cast<std::size_t>(r.ptr - data);
}

std::size_t Server::Connection::block_size(const Limits& limits) noexcept {
  return kBatchBytes + field_bytes(field_count(limits)) + in_capacity(limits) + kOutCapacity +
         kScratchCapacity;
}

Server::Connection::Connection(Server& server, Accepted& a)
    : server_(server),
      stream_(a.stream),
      watch_(a.watch),
#if ARBOR_HTTP_TLS
      tls_(a.tls.get()),
#endif
      in_capacity_(in_capacity(server.options_.limits)),
      field_count_(field_count(server.options_.limits)),
      parser_(server.options_.limits, {}) {}

Server::Connection::~Connection() {
  server_.give_body_buffer(std::move(body_buffer_), body_peer_);
  server_.blocks_->give(block_);
}

void Server::Connection::give_back_buffers() noexcept {
  server_.blocks_->give(std::exchange(block_, nullptr));
  batch_ = nullptr;
  in_ = nullptr;
  out_ = {nullptr, 0};
  scratch_ = {};
  parser_.use_fields({});
}

bool Server::Connection::take_buffers() noexcept {
  if (block_ != nullptr) return true;
  block_ = server_.blocks_->take();
  if (block_ == nullptr) return false;
  // Field is an implicit-lifetime aggregate of two trivially copyable views, and the parser
  // assigns each one before it reads it: the block's bytes need no construction per request
  // (which would write all max_fields of them, 3.2 KB by default, every time).
  batch_ = new (block_) Batch;
  parser_.use_fields({reinterpret_cast<Field*>(block_ + kBatchBytes), field_count_});
  in_ = block_ + kBatchBytes + field_bytes(field_count_);
  out_ = {in_ + in_capacity_, kOutCapacity};
  scratch_ = {in_ + in_capacity_ + kOutCapacity, kScratchCapacity};
  return true;
}

Server::Connection::ReadNow Server::Connection::wake(std::int64_t woke) noexcept {
  if (woke < 0 || !take_buffers()) return ReadNow::ended;
  auto n = stream_.try_read_some(std::as_writable_bytes(std::span(in_, in_capacity_)));
  if (!n) {
    if (n.error() != std::errc::resource_unavailable_try_again) return ReadNow::ended;
    give_back_buffers();  // stale readiness: park again holding nothing
    return ReadNow::nothing;
  }
  if (*n == 0) return ReadNow::ended;
  end_ = *n;
  busy();
  return ReadNow::got;
}

Task<Server::Connection::ReadNow> Server::Connection::wake_tls(std::int64_t woke) {
#if ARBOR_HTTP_TLS
  if (woke < 0 || !take_buffers()) co_return ReadNow::ended;
  auto n = co_await tls_->read_some(std::as_writable_bytes(std::span(in_, in_capacity_)));
  if (!n || *n == 0) {  // an error, close_notify, or an end without it
    // Draining, shutdown() ended this idle connection's reads: a close of our choosing, which
    // the client must see as one (close_notify), not as a truncation.
    if (!n && n.error() == tls::Errc::truncated &&
        server_.draining_.load(std::memory_order_relaxed))
      co_await close_notify();
    co_return ReadNow::ended;
  }
  end_ = *n;
  busy();
  co_return ReadNow::got;
#else
  (void)woke;
  co_return ReadNow::ended;
#endif
}

bool Server::Connection::tls_buffered() const noexcept {
#if ARBOR_HTTP_TLS
  return tls_ != nullptr && tls_->has_buffered_input();
#else
  return false;
#endif
}

Task<void> Server::Connection::close_notify() {
#if ARBOR_HTTP_TLS
  watch_.deadline.store(io::now_ns() + server_.options_.write_timeout.count() * 1'000'000,
                        std::memory_order_relaxed);
  (void)co_await tls_->shutdown();
#else
  co_return;
#endif
}

bool Server::Connection::parse() noexcept {
  if (reading_body_) {
    if (chunked_) {
      if (decode_chunked()) return true;
    } else if (body_have_ == body_want_) {
      reading_body_ = false;
      body_ = {body_buffer_.get(), body_want_};
      return true;  // status_ is still the head's: complete
    }
  } else if (!closing_) {
    // The previous reply is out of the buffers that held its request (a body that went out
    // straight from there was written before this call), so the body buffer can go back.
    if (body_buffer_ != nullptr) server_.give_body_buffer(std::move(body_buffer_), body_peer_);
    const std::size_t skipped =
        static_cast<std::size_t>(std::min<std::uint64_t>(discard_, end_ - begin_));
    begin_ += skipped;
    discard_ -= skipped;
    if (discard_ == 0 && begin_ < end_ && end_ - begin_ >= need_) {
      status_ = parser_.parse({in_ + begin_, end_ - begin_});
      if (status_ == RequestParser::Status::complete && take_body()) return true;
      if (status_ == RequestParser::Status::error) {
        error_status_ = parser_.error_status();
        return true;
      }
    }
  }
  // Counted per batch: one shared atomic add per read, not one per pipelined request.
  if (answered_ > 0)
    server_.requests_.fetch_add(std::exchange(answered_, 0), std::memory_order_relaxed);
  return false;
}

// A body buffer from the server's pool, within this peer's share (the peer's address is asked
// for here, once per body that needs a buffer, not per connection).
std::unique_ptr<char[]> Server::Connection::take_body_buffer() noexcept {
  auto peer = stream_.peer_address();
  body_peer_ = peer ? PeerKey::of(*peer) : PeerKey{};
  return server_.take_body_buffer(body_peer_);
}

// After a complete head: true if its body is all here (body_ then views it, in the input buffer);
// false if the batch is over until more is read (need_, or the body buffer, says how much). A
// body no body buffer can take turns the request into a 503.
bool Server::Connection::take_body() noexcept {
  const Request& request = parser_.request();
  const std::size_t head = parser_.head_size();
  // Within max_body, which the parser enforced; the buffers below are sized by it too.
  const auto length = static_cast<std::size_t>(request.content_length);
  need_ = 0;
  body_in_input_ = 0;
  chunked_ = request.chunked;
  if (chunked_) {  // its size is unknown: always a body buffer (--max-body bounds it)
    body_buffer_ = take_body_buffer();
    if (body_buffer_ == nullptr) {
      status_ = RequestParser::Status::error;
      error_status_ = 503;
      return true;
    }
    decoder_.reset({body_buffer_.get(), static_cast<std::size_t>(parser_.limits().max_body)},
                   parser_.limits().max_head);
    return decode_chunked();
  }
  if (length <= end_ - begin_ - head) {
    body_ = {in_ + begin_ + head, length};
    body_in_input_ = length;
    return true;
  }
  if (head + length <= in_capacity_) {  // fits: wait for it, then parse the head again
    need_ = head + length;
    send_continue_if_expected();  // before the reset: the head's fields go with it
    parser_.reset();
    status_ = RequestParser::Status::incomplete;
    return false;
  }
  body_buffer_ = take_body_buffer();
  if (body_buffer_ == nullptr) {
    status_ = RequestParser::Status::error;
    error_status_ = 503;
    discard_ = length;  // what linger() may expect beyond the bytes already read
    return true;
  }
  // The head stays where it is (read() leaves it alone now); what came of the body moves over.
  body_have_ = end_ - begin_ - head;
  body_want_ = length;
  std::memcpy(body_buffer_.get(), in_ + begin_ + head, body_have_);
  end_ = begin_ + head;
  reading_body_ = true;
  send_continue_if_expected();
  return false;
}

// RFC 9110 §10.1.1: a client that sent "Expect: 100-continue" may wait for a 100 before it sends
// the body, so one goes out before the server waits for the body (a client without a fallback
// waited for the idle timeout; curl waits a second). Once per request (the head may be parsed
// again as its body arrives); never to HTTP/1.0 (§15.2). A request whose head alone decides the
// reply (an error, a 503 for want of a body buffer) gets that reply instead, and no 100.
void Server::Connection::send_continue_if_expected() noexcept {
  static constexpr std::string_view k100 = "HTTP/1.1 100 Continue\r\n\r\n";
  const Request& request = parser_.request();
  if (continued_ || request.version_minor == 0) return;
  if (!expects_continue(request.field("expect")) || out_.room() < k100.size())
    return;  // no room: the replies queued before it go first, and the client falls back
  out_.put(k100);
  continued_ = true;
}

// Feeds the decoder what follows the head in the input buffer. True once the body is whole
// (what came after it then moves up behind the head) or malformed (status_ is then an error).
bool Server::Connection::decode_chunked() noexcept {
  std::size_t from = begin_ + parser_.head_size();
  std::size_t used = 0;
  const auto s = decoder_.decode({in_ + from, end_ - from}, used);
  if (s == ChunkedDecoder::Status::incomplete) {
    if (begin_ > 0) {
      // Move the head to the start of the buffer, for room to read behind it, and parse it
      // again there (its views move with it; the same bytes parse the same way).
      std::memmove(in_, in_ + begin_, from - begin_);
      from -= begin_;
      begin_ = 0;
      parser_.reset();
      status_ = parser_.parse({in_, from});
    }
    end_ = from;  // all of it decoded: the next read goes right behind the head
    reading_body_ = true;
    send_continue_if_expected();
    return false;
  }
  reading_body_ = false;
  if (s == ChunkedDecoder::Status::error) {
    status_ = RequestParser::Status::error;
    error_status_ = decoder_.error_status();
    return true;
  }
  std::memmove(in_ + from, in_ + from + used, end_ - from - used);
  end_ -= used;
  body_ = {body_buffer_.get(), decoder_.size()};
  return true;
}

bool Server::Connection::respond() {
  if (placing_ == Placing::nothing) {
    answer();
    placing_ = Placing::head;
  }
  if (placing_ == Placing::head) {
    if (out_.room() < head_bound(reply_, server_.options_.server_name) + body_size_ &&
        out_.size > 0)
      return false;  // write first: then it fits, as answer() keeps a head to half the buffer
    put_head();
    if (out_.room() < body_size_) {
      // A body larger than the buffer goes out straight from where it is, in the same write.
      spill_ = reply_.body.substr(0, body_size_);
      placing_ = Placing::spilled;
      return false;
    }
    out_.put(reply_.body.substr(0, body_size_));
  }
  placing_ = Placing::nothing;
  return true;
}

// Decides the reply to what parse() found, and consumes that request's head.
void Server::Connection::answer() {
  // One clock read per batch, not per response.
  if (answered_++ == 0) std::memcpy(batch_->date, http_date().data(), kDateSize);
  keep_alive_ = false;
  version_minor_ = 1;
  bool head_only = false;
  if (status_ == RequestParser::Status::error) {
    server_.parse_errors_.fetch_add(1, std::memory_order_relaxed);
    reply_ = {};
    reply_.status = error_status_;
    reply_.body = reason_phrase(reply_.status);
    closing_ = failed_ = true;
  } else {
    const Request& request = parser_.request();
    keep_alive_ = request.keep_alive;
    version_minor_ = request.version_minor;
    head_only = request.method == "HEAD";
    Request whole = request;
    whole.body = body_;
    try {
      reply_ = server_.handler_(whole, scratch_);
    } catch (...) {  // a handler bug costs its request, not the connection's neighbours
      reply_ = internal_error();
    }
    // The body went with the request: in the input buffer, right after the head, or (then
    // end_ already stops at the head) in the body buffer.
    begin_ += parser_.head_size() + body_in_input_;
    body_ = {};
    continued_ = false;
    request_started_ = 0;
    body_started_ = 0;
    closing_ = !keep_alive_;
    parser_.reset();
  }
  if (head_bound(reply_, server_.options_.server_name) > kOutCapacity / 2)  // absurd values
    reply_ = internal_error();
  body_size_ = head_only ? 0 : reply_.body.size();
}

void Server::Connection::put_head() noexcept {
  out_.put("HTTP/1.1 ");
  out_.put_number(static_cast<std::uint64_t>(reply_.status));
  out_.put(" ");
  out_.put(reason_phrase(reply_.status));
  out_.put("\r\nServer: ");
  out_.put(server_.options_.server_name);
  out_.put("\r\nDate: ");
  out_.put({batch_->date, kDateSize});
  if (!reply_.content_type.empty()) {
    out_.put("\r\nContent-Type: ");
    out_.put(reply_.content_type);
  }
  out_.put("\r\nContent-Length: ");
  out_.put_number(reply_.body.size());  // a HEAD's too: what a GET would get
  if (!reply_.allow.empty()) {
    out_.put("\r\nAllow: ");
    out_.put(reply_.allow);
  }
  if (failed_ && reply_.status == 503)  // no body buffer free: a moment's wait may find one
    out_.put("\r\nRetry-After: 1");
  if (!keep_alive_)
    out_.put("\r\nConnection: close");
  else if (version_minor_ == 0)
    out_.put("\r\nConnection: keep-alive");
  out_.put("\r\n\r\n");
}

Task<Result<void>> Server::Connection::write() {
  // Emptied now, not after the write: nothing refills the buffer while the write is pending.
  const std::size_t size = std::exchange(out_.size, 0);
  batch_->parts[0] = {out_.data, size};
  batch_->parts[1] = {spill_.data(), spill_.size()};
  spill_ = {};
  return write_parts(batch_->parts[1].size == 0 ? 1 : 2);
}

// write_all's loop, with the write-progress deadline published before each chunk: the sweeper
// cuts a client that takes nothing for write_timeout, never one that reads slowly (a deadline
// left from the read before, a head's, cut such a client at 11 s: issue 32). One buffer goes
// out with a plain send, two gathered.
Task<Result<void>> Server::Connection::write_parts(std::size_t count) {
  io::ConstBuffer* parts = batch_->parts;
  const std::int64_t timeout = server_.options_.write_timeout.count() * 1'000'000;
  std::size_t first = 0;
  while (first < count && parts[first].size == 0)
    ++first;
  while (first < count) {
    watch_.deadline.store(io::now_ns() + timeout, std::memory_order_relaxed);
#if ARBOR_HTTP_TLS
    if (tls_ != nullptr) {  // HTTPS: the parts one at a time (TLS has no gathered write)
      auto n = co_await tls_->write_some(
          bytes(static_cast<const char*>(parts[first].data), parts[first].size));
      if (!n) co_return n.error();
      parts[first].data = static_cast<const char*>(parts[first].data) + *n;
      parts[first].size -= *n;
      if (parts[first].size == 0) ++first;
      continue;
    }
#endif
    auto n = count - first == 1
                 ? co_await stream_.write_some(
                       bytes(static_cast<const char*>(parts[first].data), parts[first].size))
                 : co_await stream_.write_some(
                       std::span<const io::ConstBuffer>(parts + first, count - first));
    if (!n) co_return n.error();
    std::size_t sent = *n;
    while (first < count && sent >= parts[first].size)
      sent -= parts[first++].size;
    if (first < count) {
      parts[first].data = static_cast<const char*>(parts[first].data) + sent;
      parts[first].size -= sent;
    }
  }
  co_return Result<void>{};
}

void Server::Connection::deadline() noexcept {
  const std::int64_t now = io::now_ns();
  const std::int64_t idle = now + server_.options_.idle_timeout.count() * 1'000'000;
  std::int64_t deadline = idle;
  if (need_ != 0 || reading_body_) {
    // A body: due body_timeout after its head, with no gap over idle_timeout between reads
    // (nginx's client_body_timeout); set once per body, at its first wait.
    if (body_started_ == 0) body_started_ = now;
    // Named: libc++'s milliseconds count in long long, and int64_t is long on FreeBSD (and
    // Linux), so the two sides' types differ there.
    deadline = std::min<std::int64_t>(
        idle, body_started_ + server_.options_.body_timeout.count() * 1'000'000);
  } else if (discard_ == 0 && begin_ < end_) {
    // Part of a head: due header_timeout after its start.
    if (request_started_ == 0) request_started_ = now;
    deadline = request_started_ + server_.options_.header_timeout.count() * 1'000'000;
  }
  watch_.deadline.store(deadline, std::memory_order_relaxed);
  if (begin_ == end_ && discard_ == 0) {
    idle_ = true;
    watch_.idle_since.store(now, std::memory_order_relaxed);
  }
}

void Server::Connection::busy() noexcept {
  if (std::exchange(idle_, false)) watch_.idle_since.store(0, std::memory_order_relaxed);
}

Server::Connection::Read Server::Connection::read() noexcept {
  std::size_t* end = nullptr;
  const auto into = read_target(end);
  return Read(stream_, into, *end);
}

Task<bool> Server::Connection::read_tls() {
#if ARBOR_HTTP_TLS
  std::size_t* end = nullptr;
  const auto into = read_target(end);
  auto n = co_await tls_->read_some(into);
  if (!n || *n == 0) co_return false;
  *end += *n;
  co_return true;
#else
  co_return false;
#endif
}

std::span<std::byte> Server::Connection::read_target(std::size_t*& end) noexcept {
  if (reading_body_ && !chunked_) {  // no more than the body: what follows is the next request's
    end = &body_have_;
    return std::as_writable_bytes(
        std::span(body_buffer_.get() + body_have_, body_want_ - body_have_));
  }
  if (reading_body_) {
    // Chunked: the head is at the start (decode_chunked() put it there) and must stay.
  } else if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (begin_ > 0) {
    std::memmove(in_, in_ + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    // A partial head's views (method, target, path) still point where its bytes were, which
    // this read may overwrite: the parser starts over on them where they are now (once per
    // read, at most max_head bytes; they parse the same way).
    parser_.reset();
  }
  end = &end_;
  return std::as_writable_bytes(std::span(in_ + end_, in_capacity_ - end_));
}

bool Server::Connection::must_linger() const noexcept {
  // After a reply that closes, the request's unread body (if any) is discard_ bytes, of which
  // [begin_, end_) are already read: anything else means the client may still be sending.
  return failed_ || discard_ != end_ - begin_;
}

Task<void> Server::Connection::linger() {
  // Closing with unread request bytes makes the kernel send a reset, which destroys the reply
  // in the client's receive buffer before it reads it (issue 14). So: half-close, which sends
  // the reply's FIN at once, then read and drop what the client still sends until its EOF,
  // within the bounds above (the sweeper enforces the deadlines).
  const std::uint64_t buffered = end_ - begin_;
  const std::uint64_t budget = kLingerBytes + (discard_ > buffered ? discard_ - buffered : 0);
  (void)stream_.shutdown_write();
  const std::int64_t until = io::now_ns() + kLingerTotalNs;
  std::uint64_t skipped = 0;
  while (skipped < budget) {
    const std::int64_t now = io::now_ns();
    if (now >= until) break;
    watch_.deadline.store(std::min(until, now + kLingerGapNs), std::memory_order_relaxed);
    auto n = co_await stream_.read_some(std::as_writable_bytes(std::span(in_, in_capacity_)));
    if (!n || *n == 0) break;
    skipped += *n;
  }
}

}  // namespace arbor::http
