// StreamSocket: a connected byte stream for tasks, what TcpStream and UnixStream share.
//
// Every operation returns a Result; none throws. At most one read-side and one write-side
// operation may be pending at a time (a second gets device_or_resource_busy). close() — or
// destruction — completes pending operations with operation_canceled. Writes to a peer that
// reset the connection fail with broken_pipe / connection_reset; they never raise SIGPIPE.
// Ownership: the object owns its socket (BasicSocket); buffers passed to an operation are the
// caller's and must outlive its await.
#pragma once

#include <cstddef>
#include <span>

#include "arbor/io/engine.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/basic_socket.hpp"
#include "arbor/runtime/io_awaiter.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

class StreamSocket : public BasicSocket {
 public:
  /// Reads what is available, at least one byte; 0 means the peer closed its side.
  detail::TransferAwaiter read_some(std::span<std::byte> buffer) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::receive,
                                   buffer.data(), buffer.size());
  }
  /// Waits until read_some would not wait (data, the peer's end, or an error is there),
  /// consuming nothing: a connection that waits this way pins no buffer (Tokio's readable()).
  /// It counts as the pending read-side operation. Like any readiness it may, rarely, be
  /// followed by a read that finds nothing yet and waits.
  detail::StatusAwaiter readable() noexcept {
    return detail::StatusAwaiter(socket_.engine(), socket_.ref(), io::OpKind::readable);
  }
  /// readable() for code that waits outside any task (http::Server parks idle connections so,
  /// with no coroutine frame): sets `op` up as a readable wait on this stream, keeping the
  /// caller's `complete` and `context`, and starts it as io::Engine::start() does. True: it
  /// finished at once (the result, 0 or -errno, is in op.result; `complete` is not called).
  /// False: `complete` runs exactly once, on a worker, when it finishes, perhaps before this
  /// returns, and Runtime::request_stop() finishes it with -ECANCELED. The caller keeps `op`
  /// in place and alive until then and starts no other read on the stream meanwhile.
  bool start_readable(io::Operation& op) noexcept;
  /// start_readable()'s partners for a read into `buffer` and a write of `buffers` (a gather
  /// list of at most IOV_MAX entries), for callers that complete with a callback rather than a
  /// coroutine (arbor::asio::Stream). Same contract: true means finished at once (op.result
  /// holds bytes moved or -errno; `complete` is not called); false means `complete` runs
  /// exactly once, on a worker. The caller owns `op`, `buffer`, and the `buffers` array with
  /// what it points at, and keeps all of them in place until then; one read and one write at
  /// most may be pending (another finishes at once with -EBUSY).
  bool start_receive(io::Operation& op, std::span<std::byte> buffer) noexcept;
  bool start_send(io::Operation& op, std::span<const io::ConstBuffer> buffers) noexcept;
  /// Asks `op` (started by one of the start_ calls on this stream) to finish early with
  /// -ECANCELED. Safe to race with its completion; harmless once it has completed, as long as
  /// `op` still exists.
  void cancel(io::Operation& op) noexcept;
  /// Reads what is available now, without waiting: bytes read (0: the peer closed its side,
  /// or `buffer` is empty), or resource_unavailable_try_again if nothing is there yet. The
  /// partner of readable(), whose readiness may be stale: a server that waits with readable()
  /// takes its buffer and tries this, and on try_again gives the buffer back and waits again,
  /// so it never holds a buffer while it waits. Not while a read on this stream is pending
  /// (device_or_resource_busy).
  Result<std::size_t> try_read_some(std::span<std::byte> buffer) noexcept;
  /// Reads exactly buffer.size() bytes; end_of_stream if the peer closes first.
  Task<Result<void>> read_exact(std::span<std::byte> buffer);

  /// Writes some of `buffer` (at least one byte unless it is empty).
  detail::TransferAwaiter write_some(std::span<const std::byte> buffer) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::send,
                                   const_cast<std::byte*>(buffer.data()), buffer.size());
  }
  /// Gather write of some of `buffers` (no copy; the array must outlive the await).
  detail::TransferAwaiter write_some(std::span<const io::ConstBuffer> buffers) noexcept {
    return detail::TransferAwaiter(socket_.engine(), socket_.ref(), io::OpKind::send_vectored,
                                   const_cast<io::ConstBuffer*>(buffers.data()), buffers.size());
  }
  /// Writes all of `buffer`.
  Task<Result<void>> write_all(std::span<const std::byte> buffer);
  /// Writes all of `buffers`, in order, with as few system calls as the kernel allows.
  Task<Result<void>> write_all(std::span<const io::ConstBuffer> buffers);

  /// Sends FIN: the peer reads end-of-stream; this side can still read.
  Result<void> shutdown_write() noexcept;
  /// Closes now: when it returns the peer can see the end of the stream; pending operations
  /// complete with operation_canceled. Idempotent. Afterwards this object owns no descriptor
  /// (the engine closes the handle).
  void close() noexcept { socket_.close(); }

 protected:
  StreamSocket() = default;
  StreamSocket(io::Engine& engine, io::DescriptorRef socket) noexcept
      : BasicSocket(engine, socket) {}
};

}  // namespace arbor
