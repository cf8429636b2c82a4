// StreamSocket's composed operations (read_exact, write_all) and its non-waiting read.
#include "arbor/runtime/stream_socket.hpp"

#include <algorithm>
#include <array>
#include <cerrno>

#include "arbor/io/socket.hpp"
#include "arbor/runtime/error.hpp"

namespace arbor {

Result<std::size_t> StreamSocket::try_read_some(std::span<std::byte> buffer) noexcept {
  if (buffer.empty()) return std::size_t{0};
  io::Operation op;
  op.target(socket_.ref());
  if (op.descriptor == nullptr) return std::make_error_code(std::errc::bad_file_descriptor);
  op.kind = io::OpKind::receive;
  op.data = buffer.data();
  op.size = buffer.size();
  const std::int64_t r = socket_.engine()->receive_now(op);
  if (r < 0) return errno_code(static_cast<int>(-r));
  return static_cast<std::size_t>(r);
}

bool StreamSocket::start_readable(io::Operation& op) noexcept {
  op.target(socket_.ref());
  op.kind = io::OpKind::readable;
  op.data = nullptr;
  op.size = 0;
  op.address = nullptr;
  op.result = 0;
  // A reused Operation: a cancel that reached its last wait must not cancel this one.
  op.cancel_requested.store(false, std::memory_order_relaxed);
  if (op.descriptor == nullptr) {
    op.result = -EBADF;
    return true;
  }
  return socket_.engine()->start(op);
}

namespace {
// What every start_ call sets before handing `op` to the engine.
bool start_on(io::Engine* engine, io::Operation& op) noexcept {
  op.address = nullptr;
  op.result = 0;
  // A reused Operation: a cancel that reached its last run must not cancel this one.
  op.cancel_requested.store(false, std::memory_order_relaxed);
  if (op.descriptor == nullptr) {
    op.result = -EBADF;
    return true;
  }
  return engine->start(op);
}
}  // namespace

bool StreamSocket::start_receive(io::Operation& op, std::span<std::byte> buffer) noexcept {
  op.target(socket_.ref());
  op.kind = io::OpKind::receive;
  op.data = buffer.data();
  op.size = buffer.size();
  return start_on(socket_.engine(), op);
}

bool StreamSocket::start_send(io::Operation& op,
                              std::span<const io::ConstBuffer> buffers) noexcept {
  op.target(socket_.ref());
  op.kind = io::OpKind::send_vectored;
  op.data = const_cast<io::ConstBuffer*>(buffers.data());
  op.size = buffers.size();
  return start_on(socket_.engine(), op);
}

void StreamSocket::cancel(io::Operation& op) noexcept {
  // Never started (or started on a closed stream): no descriptor to look in.
  if (op.descriptor == nullptr) return;
  if (auto* engine = socket_.engine(); engine != nullptr) engine->cancel(op);
}

Task<Result<void>> StreamSocket::read_exact(std::span<std::byte> buffer) {
  while (!buffer.empty()) {
    auto n = co_await read_some(buffer);
    if (!n) co_return n.error();
    if (*n == 0) co_return make_error_code(Errc::end_of_stream);
    buffer = buffer.subspan(*n);
  }
  co_return Result<void>{};
}

Task<Result<void>> StreamSocket::write_all(std::span<const std::byte> buffer) {
  while (!buffer.empty()) {
    auto n = co_await write_some(buffer);
    if (!n) co_return n.error();
    buffer = buffer.subspan(*n);
  }
  co_return Result<void>{};
}

Task<Result<void>> StreamSocket::write_all(std::span<const io::ConstBuffer> buffers) {
  // The kernel may take part of the list; the unsent tail is rebuilt in a small local array
  // (in the frame), in chunks of at most kMax buffers.
  constexpr std::size_t kMax = 64;
  std::array<io::ConstBuffer, kMax> pending;
  std::size_t next = 0;   // first buffer of `buffers` not yet copied into `pending`
  std::size_t count = 0;  // buffers in `pending`
  std::size_t first = 0;  // first unsent entry of `pending`
  for (;;) {
    if (first == count) {
      if (next == buffers.size()) co_return Result<void>{};
      count = std::min(kMax, buffers.size() - next);
      std::copy_n(buffers.begin() + static_cast<std::ptrdiff_t>(next), count, pending.begin());
      next += count;
      first = 0;
      while (first < count && pending[first].size == 0)
        ++first;
      continue;
    }
    auto n = co_await write_some(
        std::span<const io::ConstBuffer>(pending.data() + first, count - first));
    if (!n) co_return n.error();
    std::size_t sent = *n;
    while (first < count && sent >= pending[first].size)
      sent -= pending[first++].size;
    if (first < count) {
      pending[first].data = static_cast<const std::byte*>(pending[first].data) + sent;
      pending[first].size -= sent;
    }
    while (first < count && pending[first].size == 0)
      ++first;
  }
}

Result<void> StreamSocket::shutdown_write() noexcept {
  auto h = socket_.handle();
  if (!h) return h.error();
  return io::shutdown(*h, io::ShutdownHow::write);
}

}  // namespace arbor
