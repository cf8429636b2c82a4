// Server::Accepted, what a connection holds for its whole life (and all it holds while idle);
// Server::Connection, one turn of its keep-alive loop, as steps Server::turn() calls in order
// (wake, parse, respond, write, deadline, read, linger); and Server::Watch, the part the
// sweeper and shutdown() reach from other threads.
//
// Invariant between steps: in_[begin_, end_) is input not yet consumed, and the output buffer
// holds whole responses, in request order, that no write has taken yet. The buffers (parser
// fields, input, output, scratch) are one block lent by the server's BlockPool while the
// connection has something of a request in hand. An idle connection is no task at all: its
// turn ends, giving the block back, and it is parked on a readable wait that pins nothing.
// Readiness can be stale (epoll reports an edge whose bytes an earlier read already took), so
// a wake reads without waiting (wake()) and, finding nothing, parks again: a connection never
// waits holding buffers. On the keep-alive path the only system calls are write()'s, wake()'s
// read and, on epoll, the park's one-byte peek (io_uring's readable wait needs none: the
// socket's multishot receive answers it).
//
// HTTPS (ARBOR_HTTP_TLS, and ServerOptions::tls set): Accepted also holds the handshaken
// tls::Stream, over a SocketRef to its own socket, and a Connection reads and writes through
// it (wake_tls(), read_tls(), the write's TLS branch); everything else (the sweeper's cut,
// shutdown's, the linger, the peer's address) still works on the socket itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string_view>

#include "arbor/http/date.hpp"
#include "arbor/http/request_parser.hpp"
#include "arbor/http/server.hpp"
#include "arbor/io/operation.hpp"
#include "arbor/io/socket.hpp"
#include "arbor/runtime/frame_pool.hpp"
#include "peer_shares.hpp"
#if ARBOR_HTTP_TLS
#include "arbor/tls/context.hpp"
#include "arbor/tls/stream.hpp"
#endif

namespace arbor::http {

#if ARBOR_HTTP_TLS
/// The TLS stream's view of a connection's socket: the socket stays Accepted's (its Watch,
/// the sweeper and shutdown() reach it as they do a plain one's), and the stream only reads
/// and writes it. Valid while that Accepted lives, which outlives its stream.
struct SocketRef {
  TcpStream* socket;
  auto read_some(std::span<std::byte> into) noexcept { return socket->read_some(into); }
  auto write_some(std::span<const std::byte> from) noexcept { return socket->write_some(from); }
};
using TlsStream = tls::Stream<SocketRef>;
#endif

/// What other threads see of a connection. The sweeper, the eviction and shutdown() touch fd,
/// cut and drained (and the list links) only under connections_mutex_, and deadline and
/// idle_since only atomically; the Accepted that holds it is listed from run() to end(), so
/// alive while listed.
struct Server::Watch {
  Watch* prev = nullptr;
  Watch* next = nullptr;
  io::Handle fd = io::kInvalidHandle;
  std::atomic<std::int64_t> deadline{std::numeric_limits<std::int64_t>::max()};
  // When its read began waiting with nothing of a request received (io::now_ns()); 0 while a
  // request is in progress. Relaxed: the eviction only picks a candidate, and a connection
  // that turns busy as it is picked loses its request as at any keep-alive close.
  std::atomic<std::int64_t> idle_since{0};
  bool cut = false;      // shut down by the sweeper, or evicted
  bool drained = false;  // reads shut down by shutdown()
};

/// An accepted connection's lasting part, all it holds while idle: its socket, its Watch and
/// the readable wait it is parked on. A connection runs as a task only while it has something
/// to do: serve() starts at a wake and ends at the next idle point, parking this again, so an
/// idle connection costs this record (about 300 bytes) and its engine descriptor, not a
/// coroutine frame with a request's state (1.5 KB; docs/benchmarks.md, "Idle connections").
/// Ownership: the server's, from accept to end(); made and listed by run(). While parked, only
/// the wait's completion (on_readable) may touch it; from then on, only the serve() it starts.
struct Server::Accepted {
  Accepted(Server& s, TcpStream st) noexcept : server(s), stream(std::move(st)) {}
  // From the frame pool, as the coroutine frames it stands in for are (bounded caches).
  static void* operator new(std::size_t size) { return frame_pool::allocate(size); }
  static void operator delete(void* p, std::size_t size) noexcept {
    frame_pool::deallocate(p, size);
  }

  Server& server;
  TcpStream stream;
  Watch watch;
  io::Operation wait;     // the parked readable(); its completion starts serve()
  std::int64_t woke = 0;  // that wait's result (0, or -errno), for the serve() it starts
#if ARBOR_HTTP_TLS
  // HTTPS: the handshaken stream over `stream` (null before the handshake, and always for
  // plain HTTP). Declared after `stream`, so destroyed before it.
  std::unique_ptr<TlsStream> tls;
#endif
};

/// Lives in turn()'s coroutine frame and is touched only by that coroutine, on whichever
/// thread a co_await resumes it (so nothing thread-local is kept across one), except watch_,
/// which other threads reach as Watch says.
class Server::Connection {
 public:
  /// A turn of `a`, which was idle (parked) until now: no buffers, nothing of a request.
  Connection(Server& server, Accepted& a);
  /// Gives back what it holds (buffers); `a` stays the server's.
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Nothing of a request in hand and no output (after write(), before read()): the buffers
  /// can go back.
  bool idle() const noexcept { return begin_ == end_ && discard_ == 0 && out_.size == 0; }
  /// At the wake that starts a turn (the parked wait's `woke` result): takes the buffers and
  /// reads what is there without waiting. `nothing` when the readiness was stale (the turn
  /// parks again, holding nothing); `ended` on an error, the client's end, or no memory.
  enum class ReadNow { got, nothing, ended };
  ReadNow wake(std::int64_t woke) noexcept;
  /// HTTPS (tls() true): wake()'s work through the TLS stream, which may wait for the rest of
  /// a record (within the deadline the park left); never `nothing`.
  Task<ReadNow> wake_tls(std::int64_t woke);
  /// Whether the connection speaks TLS, and whether its TLS layer holds input a read would
  /// take without the socket (then it must not park: see server.hpp).
  bool tls() const noexcept { return tls_ != nullptr; }
  bool tls_buffered() const noexcept;
  /// HTTPS: sends close_notify, within write_timeout; errors are ignored (the connection
  /// closes either way).
  Task<void> close_notify();
  /// Shuts down the connection's read side: its next read sees end of stream.
  void shut_down_reads() noexcept { (void)io::shutdown(watch_.fd, io::ShutdownHow::read); }
  /// The size of the block a connection borrows under `limits`.
  static std::size_t block_size(const Limits& limits) noexcept;

  /// What lives only while a batch of requests is answered: in the block, at its start, not in
  /// every idle connection.
  struct Batch {
    io::ConstBuffer parts[2];  // write()'s gather list
    char date[kDateSize];      // this batch's; a copy, as the thread-local cache stays behind
  };
  // The block's layout: Batch, the parser's fields, then the bytes (input, output, scratch).
  static constexpr std::size_t kBatchBytes = (sizeof(Batch) + alignof(std::max_align_t) - 1) /
                                             alignof(std::max_align_t) * alignof(std::max_align_t);

  /// True with a request, its body whole (or a parse error), for respond(); false once this
  /// read's batch is over (closing, or nothing complete left), which is when its answers are
  /// counted. A body that does not fit in the input buffer is read into a body buffer taken
  /// from the server (and handed back at the next parse() or the end).
  bool parse() noexcept;
  /// Puts the reply into the output buffer. False when the output has to be written first;
  /// call again after write(), which carries on with the same reply.
  bool respond();
  /// Writes the output buffer (and a body too large for it), publishing the write-progress
  /// deadline before each chunk. Not a coroutine: it hands back write_parts' task, so the step
  /// costs one frame, as write_all's did.
  Task<Result<void>> write();
  bool has_output() const noexcept { return out_.size > 0; }
  bool closing() const noexcept { return closing_; }
  /// Publishes the deadline the sweeper enforces while read() waits and, with nothing of a
  /// request received, marks the connection idle: one the server may close for a new one.
  void deadline() noexcept;
  /// After a read that got bytes: no longer idle.
  void busy() noexcept;
  /// Awaiting it reads into the input buffer (or the body buffer, while a body goes there);
  /// false on end of stream or any error.
  class Read;
  Read read() noexcept;
  /// HTTPS: as read(), through the TLS stream (a coroutine: a TLS read is one).
  Task<bool> read_tls();
  /// Once closing: true if the client may still be sending (an error reply, or a body or
  /// requests not read), which a close would answer with a reset that loses the reply.
  bool must_linger() const noexcept;
  /// Then: half-closes, and reads and drops what the client still sends, until its EOF or a
  /// bound in time or bytes.
  Task<void> linger();

 private:
  // A fixed-capacity byte sink; callers check room() first.
  struct Output {
    char* data;
    std::size_t capacity;
    std::size_t size = 0;

    std::size_t room() const noexcept { return capacity - size; }
    void put(std::string_view s) noexcept;
    void put_number(std::uint64_t n) noexcept;
  };

  Task<Result<void>> write_parts(std::size_t count);
  // Where the next read goes (the input buffer, or the body buffer while a body goes there),
  // and the count it advances.
  std::span<std::byte> read_target(std::size_t*& end) noexcept;
  bool take_body() noexcept;
  std::unique_ptr<char[]> take_body_buffer() noexcept;
  void send_continue_if_expected() noexcept;
  bool decode_chunked() noexcept;
  void answer();
  void put_head() noexcept;

  bool take_buffers() noexcept;
  void give_back_buffers() noexcept;

  Server& server_;
  TcpStream& stream_;
  Watch& watch_;
#if ARBOR_HTTP_TLS
  TlsStream* tls_;  // Accepted's, if handshaken; null for plain HTTP
#else
  static constexpr void* tls_ = nullptr;
#endif
  const std::size_t in_capacity_;
  const std::size_t field_count_;  // the parser's field storage, at the start of block_
  // The batch state, the parser's fields, input, output and scratch, in one block from the
  // pool; null (and the three below with it, and batch_) while idle.
  char* block_ = nullptr;
  char* in_ = nullptr;
  Output out_{nullptr, 0};
  std::span<char> scratch_;
  RequestParser parser_;

  std::size_t begin_ = 0, end_ = 0;  // the unconsumed input
  std::uint64_t discard_ = 0;        // body bytes still to skip
  // A head whose body is still coming: once need_ bytes from begin_ are in, it is parsed again
  // (its views would not survive read()'s compaction), body and all. 0: none.
  std::size_t need_ = 0;
  // A body too large for the input buffer: its head stays at [begin_, end_), untouched, while
  // the body is read into body_buffer_ (body_have_ of body_want_ bytes so far).
  std::unique_ptr<char[]> body_buffer_;
  PeerKey body_peer_;  // whose share body_buffer_ counts in
  std::size_t body_have_ = 0, body_want_ = 0;
  bool reading_body_ = false;
  // A chunked body: decoded into body_buffer_ as it arrives, which is read into the input
  // buffer right behind the head (at the start of the buffer, so there is room).
  bool chunked_ = false;
  ChunkedDecoder decoder_;
  std::string_view body_;             // the current request's
  std::size_t body_in_input_ = 0;     // how much of the input, after the head, body_ used
  bool continued_ = false;            // a 100 (Continue) went out for the current request
  int error_status_ = 0;              // of the current error reply
  std::int64_t request_started_ = 0;  // when the current partial request began (0: none)
  std::int64_t body_started_ = 0;     // when its body's first wait began (0: none)
  RequestParser::Status status_ = RequestParser::Status::incomplete;
  bool closing_ = false;  // answer what is queued, then close
  bool failed_ = false;   // an error reply: linger before closing
  bool idle_ = true;      // deadline() (or the park before this turn) marked it idle

  // The reply respond() is placing, kept across the writes it asks for: its head still to go
  // in, or its body handed to write() (spill_), or none.
  enum class Placing : std::uint8_t { nothing, head, spilled } placing_ = Placing::nothing;
  Reply reply_;
  std::size_t body_size_ = 0;  // 0 for HEAD
  bool keep_alive_ = false;
  int version_minor_ = 1;

  std::string_view spill_;      // a body too large for the output buffer, sent right behind it
  std::uint64_t answered_ = 0;  // in this batch; added to the server's count once per batch

  Batch* batch_ = nullptr;  // at the start of block_
};

// read()'s awaiter: the engine's receive, then the bookkeeping that has to follow it.
class Server::Connection::Read {
 public:
  Read(TcpStream& stream, std::span<std::byte> into, std::size_t& end) noexcept
      : op_(stream.read_some(into)), end_(end) {}
  bool await_ready() noexcept { return op_.await_ready(); }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> h) noexcept {
    return op_.await_suspend(h);
  }
  bool await_resume() noexcept {
    auto n = op_.await_resume();
    if (!n || *n == 0) return false;
    end_ += *n;
    return true;
  }

 private:
  detail::TransferAwaiter op_;
  std::size_t& end_;
};

}  // namespace arbor::http
