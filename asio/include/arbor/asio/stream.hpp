// Stream: an Asio AsyncReadStream and AsyncWriteStream over an arbor TcpStream, so Beast
// HTTP, Beast WebSocket and boost::asio::ssl::stream run over arbor's engines with no
// io_context and no thread of Asio's.
//
//   arbor::asio::Stream stream(ctx, std::move(tcp));          // tcp: an arbor::TcpStream
//   boost::beast::websocket::stream<arbor::asio::Stream> ws(std::move(stream));
//   co_await ws.async_accept(arbor::asio::use_task);
//
// Ownership: the Stream owns the socket and a pinned core holding one engine operation per
// direction; an operation's buffers stay the caller's (Asio's rule: valid until the handler
// is called), its handler moves into the core's reusable slot (no allocation per operation in
// steady state) and out again before it is called, exactly once, through its associated
// executor: dispatched when the engine completes on a worker, posted when the operation
// finishes inside the initiating call, so never inline from async_read_some/async_write_some.
// One read and one write may be pending at a time; a second read (or write) completes with
// device_or_resource_busy and leaves the first alone. close(), cancel() and the destructor
// end pending operations with operation_aborted; the core lives until they have completed.
// A read of a non-empty buffer that finds the peer's end gives boost::asio::error::eof.
// Not thread-safe, like every Asio I/O object: use it from its executor (any arbor worker)
// and one task or strand at a time.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/beast/core/role.hpp>  // an enum: Beast's teardown hooks take it
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <new>
#include <span>
#include <utility>

#include "arbor/asio/context.hpp"
#include "arbor/asio/detail/bound_handler.hpp"
#include "arbor/runtime/tcp_stream.hpp"

namespace arbor::asio {

namespace detail {

// Work on `executor` for as long as the result lives (Asio's outstanding_work.tracked, or a
// work guard for an executor of the older kind).
template <class Executor>
auto track_work(const Executor& executor) {
  if constexpr (boost::asio::execution::is_executor<Executor>::value)
    return boost::asio::prefer(executor, boost::asio::execution::outstanding_work.tracked);
  else
    return boost::asio::make_work_guard(executor);
}

class StreamCore {
 public:
  using executor_type = Context::executor_type;

  // One direction: its engine operation, the write's gather list, and the handler's slot.
  struct Slot {
    using Finish = void (*)(Slot& slot, std::int64_t result, bool started_inline);
    io::Operation op;
    std::array<io::ConstBuffer, 16> gather{};
    void* storage = nullptr;  // the pending handler lives here; reused, grown when too small
    std::size_t capacity = 0;
    Finish finish = nullptr;
    std::atomic<bool> busy{false};
    bool reading = false;
    StreamCore* core = nullptr;

    void* reserve(std::size_t size) {
      if (size > capacity) {
        ::operator delete(storage);
        storage = nullptr;
        capacity = 0;
        storage = ::operator new(size);
        capacity = size;
      }
      return storage;
    }
  };

  StreamCore(const executor_type& io_executor, TcpStream tcp)
      : socket(std::move(tcp)), executor(io_executor) {
    read.reading = true;
    read.core = this;
    write.core = this;
    read.op.context = &read;
    write.op.context = &write;
    read.op.complete = &on_complete;
    write.op.complete = &on_complete;
  }
  ~StreamCore() {
    ::operator delete(read.storage);
    ::operator delete(write.storage);
  }

  void acquire() noexcept { refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // The handler and the work it keeps while the operation is pending.
  template <class Handler>
  struct Pending {
    using handler_executor = boost::asio::associated_executor_t<Handler, executor_type>;
    Pending(Handler&& h, const executor_type& io)
        : handler(std::move(h)),
          handler_work(track_work(boost::asio::get_associated_executor(handler, io))),
          io_work(track_work(io)) {}
    Handler handler;
    decltype(track_work(std::declval<handler_executor>())) handler_work;
    decltype(track_work(std::declval<executor_type>())) io_work;
  };

  // Moves the handler out of the slot, frees the slot, and hands the handler its result:
  // posted if the operation finished inside the initiating call, else dispatched.
  template <class Handler>
  static void finish(Slot& slot, std::int64_t result, bool started_inline) {
    StreamCore* core = slot.core;
    boost::system::error_code ec;
    std::size_t n = 0;
    if (result < 0)
      ec.assign(static_cast<int>(-result), boost::system::system_category());
    else if (result == 0 && slot.reading)
      ec = boost::asio::error::eof;  // only non-empty reads are started
    else
      n = static_cast<std::size_t>(result);
    auto* pending = static_cast<Pending<Handler>*>(slot.storage);
    Handler handler(std::move(pending->handler));
    auto work = std::move(pending->handler_work);
    pending->~Pending();
    slot.busy.store(false, std::memory_order_release);
    auto executor = boost::asio::get_associated_executor(handler, core->executor);
    if (started_inline)
      boost::asio::post(executor, bind_result(std::move(handler), ec, n));
    else
      boost::asio::dispatch(executor, bind_result(std::move(handler), ec, n));
    core->release();  // the operation's reference: the handler may have dropped the owner's
  }

  // The engine's completion, on a worker.
  static void on_complete(io::Operation& op, std::int64_t result) noexcept {
    auto& slot = *static_cast<Slot*>(op.context);
    slot.finish(slot, result, false);
  }

  // Starts an operation whose slot holds `handler`, or completes it at once (posted).
  template <class Handler, class Start>
  void start(Slot& slot, Handler&& handler, Start&& start_op) {
    new (slot.reserve(sizeof(Pending<Handler>))) Pending<Handler>(std::move(handler), executor);
    slot.finish = &finish<Handler>;
    acquire();
    if (start_op(slot.op)) finish<Handler>(slot, slot.op.result, true);
  }

  // Completes `handler` with `ec` and 0 bytes without starting anything (posted).
  template <class Handler>
  void refuse(Handler&& handler, boost::system::error_code ec) {
    auto ex = boost::asio::get_associated_executor(handler, executor);
    boost::asio::post(ex, bind_result(std::move(handler), ec, std::size_t{0}));
  }

  TcpStream socket;
  executor_type executor;
  Slot read;
  Slot write;

 private:
  std::atomic<int> refs_{1};
};

}  // namespace detail

class Stream {
 public:
  using executor_type = Context::executor_type;
  using lowest_layer_type = Stream;  // what ssl::stream asks of its next layer

  /// Adopts `socket` (connected, on `context`'s runtime).
  Stream(Context& context, TcpStream socket)
      : core_(new detail::StreamCore(context.get_executor(), std::move(socket))) {}
  Stream(Stream&& other) noexcept : core_(std::exchange(other.core_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      reset();
      core_ = std::exchange(other.core_, nullptr);
    }
    return *this;
  }
  ~Stream() { reset(); }

  executor_type get_executor() const noexcept { return core_->executor; }
  Stream& lowest_layer() noexcept { return *this; }
  const Stream& lowest_layer() const noexcept { return *this; }
  /// The arbor socket, for its options (no_delay, buffer sizes, addresses).
  TcpStream& socket() noexcept { return core_->socket; }
  bool is_open() const noexcept { return core_ != nullptr && core_->socket.is_open(); }

  /// Ends pending operations with operation_aborted; the socket stays open.
  void cancel() noexcept {
    if (core_ == nullptr) return;
    if (core_->read.busy.load(std::memory_order_acquire)) core_->socket.cancel(core_->read.op);
    if (core_->write.busy.load(std::memory_order_acquire)) core_->socket.cancel(core_->write.op);
  }
  void cancel(boost::system::error_code& ec) noexcept {
    cancel();
    ec = {};
  }
  /// Closes the socket; pending operations end with operation_aborted. Idempotent.
  void close() noexcept {
    if (core_ != nullptr) core_->socket.close();
  }
  void close(boost::system::error_code& ec) noexcept {
    close();
    ec = {};
  }
  /// Sends FIN: the peer reads its end; this side can still read.
  void shutdown_write(boost::system::error_code& ec) noexcept {
    auto r = core_->socket.shutdown_write();
    ec = r ? boost::system::error_code{}
           : boost::system::error_code(r.error().value(), boost::system::system_category());
  }

  /// Reads at least one byte into the first non-empty buffer of `buffers`; completes with
  /// (error_code, bytes). Empty buffers complete at once with 0.
  template <class MutableBufferSequence, class Token>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        ReadSome{core_}, token, buffers);
  }
  /// Writes some of `buffers` (up to 16 of them in one gather write); completes with
  /// (error_code, bytes).
  template <class ConstBufferSequence, class Token>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        WriteSome{core_}, token, buffers);
  }

 private:
  struct ReadSome {
    detail::StreamCore* core;
    template <class Handler, class Buffers>
    void operator()(Handler&& handler, const Buffers& buffers) const {
      boost::asio::mutable_buffer first;
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers); ++it) {
        boost::asio::mutable_buffer b(*it);
        if (b.size() != 0) {
          first = b;
          break;
        }
      }
      if (first.size() == 0) return core->refuse(std::move(handler), {});
      if (core->read.busy.exchange(true, std::memory_order_acq_rel))
        return core->refuse(std::move(handler),
                            make_error_code(boost::system::errc::device_or_resource_busy));
      core->start(core->read, std::move(handler), [&](io::Operation& op) {
        return core->socket.start_receive(op,
                                          {static_cast<std::byte*>(first.data()), first.size()});
      });
    }
  };
  struct WriteSome {
    detail::StreamCore* core;
    template <class Handler, class Buffers>
    void operator()(Handler&& handler, const Buffers& buffers) const {
      if (core->write.busy.exchange(true, std::memory_order_acq_rel))
        return core->refuse(std::move(handler),
                            make_error_code(boost::system::errc::device_or_resource_busy));
      auto& gather = core->write.gather;
      std::size_t count = 0;
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers) && count < gather.size(); ++it) {
        boost::asio::const_buffer b(*it);
        if (b.size() != 0) gather[count++] = {b.data(), b.size()};
      }
      if (count == 0) {
        core->write.busy.store(false, std::memory_order_release);
        return core->refuse(std::move(handler), {});
      }
      core->start(core->write, std::move(handler), [&](io::Operation& op) {
        return core->socket.start_send(op, {gather.data(), count});
      });
    }
  };

  void reset() noexcept {
    if (core_ == nullptr) return;
    core_->socket.close();  // pending operations complete (aborted) and release their refs
    std::exchange(core_, nullptr)->release();
  }

  detail::StreamCore* core_;
};

/// Beast's close_socket hook (its timeouts and failures close the lowest layer this way).
inline void beast_close_socket(Stream& stream) noexcept {
  stream.close();
}

/// Beast's WebSocket teardown for a Stream (found by argument-dependent lookup): sends FIN
/// and closes. The close handshake has already happened by then.
inline void teardown(boost::beast::role_type, Stream& stream, boost::system::error_code& ec) {
  stream.shutdown_write(ec);
  stream.close();
  ec = {};
}
template <class Handler>
void async_teardown(boost::beast::role_type, Stream& stream, Handler&& handler) {
  boost::system::error_code ec;
  stream.shutdown_write(ec);
  stream.close();
  auto ex = boost::asio::get_associated_executor(handler, stream.get_executor());
  boost::asio::post(ex, detail::bind_result(std::move(handler), boost::system::error_code{}));
}

}  // namespace arbor::asio
