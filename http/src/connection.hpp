// Server::Connection: one accepted socket's keep-alive loop, as steps Server::serve() calls in
// turn (parse, respond, write, deadline, read, linger), and Server::Watch, the part of it the
// sweeper and shutdown() reach from other threads.
//
// Invariant between steps: in_[begin_, end_) is input not yet consumed, and the output buffer
// holds whole responses, in request order, that no write has taken yet. The buffers (parser
// fields, input, output, scratch) are one block lent by the server's BlockPool while the
// connection has something of a request in hand; an idle connection gives it back and waits
// with readable(), which pins no buffer, so it holds only its own small state. Readiness can
// be stale (epoll reports an edge whose bytes an earlier read already took), so after
// readable() the connection reads without waiting (read_now()) and, finding nothing, gives
// the buffers back and waits again: it never waits holding them. On the keep-alive path the
// only system calls are write()'s, read_now()'s and, on epoll, readable()'s one-byte peek when
// it starts (io_uring's readable() needs none: the socket's multishot receive answers it), and
// the only coroutine frames write_all's.
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
#include "arbor/io/socket.hpp"
#include "peer_shares.hpp"

namespace arbor::http {

/// What other threads see of a connection. The sweeper, the eviction and shutdown() touch fd,
/// cut and drained (and the list links) only under connections_mutex_, and deadline and
/// idle_since only atomically; the
/// Connection that holds this keeps it listed, so alive, until its coroutine ends.
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

/// Lives in serve()'s coroutine frame and is touched only by that coroutine, on whichever
/// thread a co_await resumes it (so nothing thread-local is kept across one), except watch_,
/// which other threads reach as Watch says.
class Server::Connection {
 public:
  /// Lists the connection with the sweeper. It starts idle, without buffers.
  Connection(Server& server, TcpStream& stream);
  /// Gives back what it holds, delists it and counts it gone: the last thing this connection
  /// does to the server.
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Nothing of a request in hand and no output (after write(), before read()): the buffers
  /// can go back.
  bool idle() const noexcept { return begin_ == end_ && discard_ == 0 && out_.size == 0; }
  /// While idle: gives the buffers back (if it holds them).
  void give_back_buffers() noexcept;
  /// Waits until the client sends something (or closes), holding no buffer.
  detail::StatusAwaiter readable() noexcept { return stream_.readable(); }
  /// Borrows the buffers again; false if no memory could be had (the connection then closes).
  bool take_buffers() noexcept;
  /// After readable(), with the buffers taken back: reads what is there without waiting.
  /// `nothing` when the readiness was stale (the buffers must go back before the next wait).
  enum class ReadNow { got, nothing, ended };
  ReadNow read_now() noexcept;
  bool has_buffers() const noexcept { return block_ != nullptr; }
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
  /// After read(): no longer idle (unless the read failed: the destructor then delists it).
  void busy() noexcept;
  /// Awaiting it reads into the input buffer (or the body buffer, while a body goes there);
  /// false on end of stream or any error.
  class Read;
  Read read() noexcept;
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
  bool take_body() noexcept;
  std::unique_ptr<char[]> take_body_buffer() noexcept;
  void send_continue_if_expected() noexcept;
  bool decode_chunked() noexcept;
  void answer();
  void put_head() noexcept;

  Server& server_;
  TcpStream& stream_;
  Watch watch_;
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
  bool idle_ = false;     // deadline() marked it idle

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
