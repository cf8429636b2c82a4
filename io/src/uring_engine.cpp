// UringEngine: the completion backend (Linux io_uring through liburing).
//
// Operations become SQEs whose user_data is the Operation; a CQE becomes an event that
// completes it. Submission: workers prepare SQEs under the ring's SQ lock; inside a
// SubmitBatch (every completion runs inside one) they only queue, and the batch ends with a
// single io_uring_enter for everything the completion started. The poller thread only waits
// for CQEs (with IORING_FEAT_EXT_ARG the timeout needs no SQE, so the poller never touches
// the SQ without the lock) and harvests up to K of them per wake-up.
//
// Sends are tried once with MSG_DONTWAIT before going to the ring: on a connection with room
// in its socket buffer they finish in the call, saving a ring round trip and a hand-off.
// Cancellation is IORING_OP_ASYNC_CANCEL by user_data. Closing a socket cancels its pending
// operations and flushes the SQ before close(2), so no queued SQE can name a reused fd.
//
// Start-up probes the opcodes used and the features relied on; anything missing makes
// create() fail, and "auto" then falls back to epoll.
#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "arbor/io/engine.hpp"
#include "arbor/io/submit_batch.hpp"
#include "descriptor.hpp"
#include "log.hpp"

namespace arbor::io {
namespace {

constexpr std::uint64_t kIgnore = 0;  // cancel requests, wake NOPs

struct Ring {
  io_uring ring{};
  bool initialised = false;
  std::mutex sq_mutex;
  unsigned unsubmitted = 0;  // guarded by sq_mutex
  std::atomic<std::uint64_t>* submits = nullptr;

  ~Ring() {
    if (initialised) io_uring_queue_exit(&ring);
  }

  // Under sq_mutex: an SQE, submitting the queued ones first if the SQ is full.
  io_uring_sqe* get_sqe() noexcept {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    while (sqe == nullptr) {
      submit_locked();
      sqe = io_uring_get_sqe(&ring);
    }
    ++unsubmitted;
    return sqe;
  }

  void submit_locked() noexcept {
    if (unsubmitted == 0) return;
    int r;
    do {
      r = io_uring_submit(&ring);
    } while (r == -EINTR);
    // -EAGAIN/-EBUSY: the kernel is short of resources or the CQ is overflowing; the SQEs stay
    // queued and the next submit (or the poller's) retries them.
    if (r >= 0) unsubmitted = 0;
    submits->fetch_add(1, std::memory_order_relaxed);
  }

  // Called when a SubmitBatch ends (or at once outside one).
  static void flush(void* context) noexcept {
    auto* self = static_cast<Ring*>(context);
    std::lock_guard guard(self->sq_mutex);
    self->submit_locked();
  }

  void submitted_one() noexcept {  // under sq_mutex, after preparing SQEs
    if (!SubmitBatch::defer(&Ring::flush, this)) submit_locked();
  }
};

void prepare(io_uring_sqe* sqe, Operation& op, int fd) noexcept {
  switch (op.kind) {
    case OpKind::receive:
      io_uring_prep_recv(sqe, fd, op.data, op.size, 0);
      break;
    case OpKind::send:
      io_uring_prep_send(sqe, fd, op.data, op.size, MSG_NOSIGNAL);
      break;
    case OpKind::send_vectored: {
      auto* m = new (op.scratch) msghdr{};
      m->msg_iov = static_cast<iovec*>(op.data);
      m->msg_iovlen = op.size;
      io_uring_prep_sendmsg(sqe, fd, m, MSG_NOSIGNAL);
      break;
    }
    case OpKind::accept:
      op.address_size = Address::capacity();
      io_uring_prep_accept(sqe, fd,
                           op.address ? static_cast<sockaddr*>(op.address->native()) : nullptr,
                           op.address ? reinterpret_cast<socklen_t*>(&op.address_size) : nullptr,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
      break;
    case OpKind::connect:
      io_uring_prep_connect(sqe, fd, static_cast<const sockaddr*>(op.address->native()),
                            op.address->native_size());
      break;
    case OpKind::receive_from:
    case OpKind::send_to: {
      static_assert(sizeof(msghdr) + sizeof(iovec) <= sizeof(Operation::scratch));
      auto* m = new (op.scratch) msghdr{};
      auto* iov = new (op.scratch + sizeof(msghdr)) iovec{op.data, op.size};
      m->msg_iov = iov;
      m->msg_iovlen = 1;
      if (op.address != nullptr) {
        m->msg_name = op.address->native();
        m->msg_namelen = op.kind == OpKind::send_to ? op.address->native_size()
                                                    : Address::capacity();
      }
      if (op.kind == OpKind::send_to)
        io_uring_prep_sendmsg(sqe, fd, m, MSG_NOSIGNAL);
      else
        io_uring_prep_recvmsg(sqe, fd, m, 0);
      break;
    }
  }
  io_uring_sqe_set_data(sqe, &op);
}

class UringEngine final : public Engine {
 public:
  UringEngine(sched::Scheduler& scheduler, const EngineOptions& options)
      : Engine(scheduler, options), rings_(static_cast<std::size_t>(options.pollers)) {}

  std::error_code init() {
    for (auto& r : rings_) {
      r = std::make_unique<Ring>();
      r->submits = &submits_;
      io_uring_params params{};
      params.flags = IORING_SETUP_CLAMP;
      const int e = io_uring_queue_init_params(options().ring_entries, &r->ring, &params);
      if (e < 0) return {-e, std::system_category()};
      r->initialised = true;
      constexpr unsigned kNeeded = IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG;
      if ((params.features & kNeeded) != kNeeded)
        return std::make_error_code(std::errc::function_not_supported);
      io_uring_probe* probe = io_uring_get_probe_ring(&r->ring);
      if (probe == nullptr) return std::make_error_code(std::errc::function_not_supported);
      bool ok = true;
      for (int opcode : {IORING_OP_NOP, IORING_OP_RECV, IORING_OP_SEND, IORING_OP_SENDMSG,
                         IORING_OP_RECVMSG, IORING_OP_ACCEPT, IORING_OP_CONNECT,
                         IORING_OP_ASYNC_CANCEL})
        ok = ok && io_uring_opcode_supported(probe, opcode);
      io_uring_free_probe(probe);
      if (!ok) return std::make_error_code(std::errc::function_not_supported);
    }
    start_pollers();
    return {};
  }

  ~UringEngine() override { stop(); }

  const char* name() const noexcept override { return "uring"; }

  Result<Descriptor*> attach(Handle handle) noexcept override {
    if (int e = make_non_blocking(handle); e != 0) {
      close_handle(handle);
      return errno_code(e);
    }
    Descriptor* d = nullptr;
    try {
      d = pool_.acquire();
    } catch (const std::bad_alloc&) {
      close_handle(handle);
      return std::make_error_code(std::errc::not_enough_memory);
    }
    const int ring = static_cast<int>(next_ring_.fetch_add(1, std::memory_order_relaxed) %
                                      rings_.size());
    {
      std::lock_guard guard(d->lock);
      d->reset(handle, ring);
    }
    descriptors_.fetch_add(1, std::memory_order_relaxed);
    return d;
  }

  bool start(Operation& op) noexcept override {
    Descriptor& d = *op.descriptor;
    const int side = Descriptor::side(op.kind);
    if (op.kind == OpKind::send || op.kind == OpKind::send_vectored) {
      {
        std::lock_guard guard(d.lock);
        if (!admit(d, op, side)) return true;
        ++d.busy;  // keeps the fd open while the syscall runs outside the lock
      }
      const std::int64_t r = perform(op, d.fd);
      Descriptor::Finish finish;
      {
        std::lock_guard guard(d.lock);
        --d.busy;
        if (r == -EAGAIN && !d.closed) return queue(d, op, side);
        finish = d.finish_if_closed();
      }
      finish_close(&d, finish);
      op.result = r == -EAGAIN ? -ECANCELED : r;
      return true;
    }
    std::lock_guard guard(d.lock);
    if (!admit(d, op, side)) return true;
    return queue(d, op, side);
  }

  // Under d.lock: whether op may start; if not, its inline result is set.
  static bool admit(Descriptor& d, Operation& op, int side) noexcept {
    if (d.closed || op.cancel_requested.load(std::memory_order_relaxed)) {
      op.result = -ECANCELED;
      return false;
    }
    if (d.slot[side] != nullptr) {
      op.result = -EBUSY;
      return false;
    }
    return true;
  }

  // Under d.lock: occupy the slot and queue the SQE. Holding d.lock here orders this SQE
  // before any cancel SQE that close() queues, and the fd cannot be closed in between.
  bool queue(Descriptor& d, Operation& op, int side) noexcept {
    d.slot[side] = &op;
    Ring& ring = *rings_[static_cast<std::size_t>(d.poller)];
    std::lock_guard guard(ring.sq_mutex);
    prepare(ring.get_sqe(), op, static_cast<int>(d.fd));
    ring.submitted_one();
    return false;
  }

  void cancel(Operation& op) noexcept override {
    Descriptor& d = *op.descriptor;
    const int side = Descriptor::side(op.kind);
    bool pending;
    {
      std::lock_guard guard(d.lock);
      op.cancel_requested.store(true, std::memory_order_relaxed);
      pending = d.slot[side] == &op;
    }
    if (!pending) return;
    Ring& ring = *rings_[static_cast<std::size_t>(d.poller)];
    std::lock_guard guard(ring.sq_mutex);
    io_uring_sqe* sqe = ring.get_sqe();
    io_uring_prep_cancel(sqe, &op, 0);
    io_uring_sqe_set_data64(sqe, kIgnore);
    ring.submit_locked();  // cancellation is urgent and rare: no batching
  }

  void close(Descriptor* d) noexcept override {
    Operation* pending[2];
    Descriptor::Finish finish;
    {
      std::lock_guard guard(d->lock);
      if (d->closed) return;
      d->closed = true;
      pending[0] = d->slot[0];
      pending[1] = d->slot[1];
      finish = d->finish_if_closed();
    }
    Ring& ring = *rings_[static_cast<std::size_t>(d->poller)];
    {
      std::lock_guard guard(ring.sq_mutex);
      for (Operation* op : pending) {
        if (op == nullptr) continue;
        op->cancel_requested.store(true, std::memory_order_relaxed);
        io_uring_sqe* sqe = ring.get_sqe();
        io_uring_prep_cancel(sqe, op, 0);
        io_uring_sqe_set_data64(sqe, kIgnore);
      }
      ring.submit_locked();  // every SQE naming this fd reaches the kernel before close(2)
    }
    finish_close(d, finish);
  }

 protected:
  std::size_t wait(int poller, std::int64_t timeout_ns,
                   std::span<sched::Event> out) noexcept override {
    Ring& r = *rings_[static_cast<std::size_t>(poller)];
    {
      std::lock_guard guard(r.sq_mutex);
      r.submit_locked();  // anything a failed submit left behind
    }
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec ts{};
    if (timeout_ns >= 0) {
      ts.tv_sec = timeout_ns / 1'000'000'000;
      ts.tv_nsec = timeout_ns % 1'000'000'000;
    }
    const int e = io_uring_wait_cqe_timeout(&r.ring, &cqe, timeout_ns >= 0 ? &ts : nullptr);
    if (e < 0 && e != -ETIME && e != -EINTR && e != -EAGAIN && e != -EBUSY)
      log::error("io_uring wait failed: {}", std::strerror(-e));
    io_uring_cqe* cqes[512];
    const unsigned max = static_cast<unsigned>(std::min<std::size_t>(out.size(), std::size(cqes)));
    const unsigned n = io_uring_peek_batch_cqe(&r.ring, cqes, max);
    std::size_t count = 0;
    for (unsigned i = 0; i < n; ++i) {
      const std::uint64_t data = io_uring_cqe_get_data64(cqes[i]);
      if (data == kIgnore) continue;
      out[count++] = {&complete, reinterpret_cast<Operation*>(static_cast<std::uintptr_t>(data)),
                      cqes[i]->res, reinterpret_cast<std::uintptr_t>(this)};
    }
    io_uring_cq_advance(&r.ring, n);
    if (n > 0) {
      // The kernel carried op pointers from the submitters to us, but the C++ memory model
      // (and ThreadSanitizer) cannot see that edge. Every SQE was queued and submitted under
      // sq_mutex, and a CQE exists only once its submitter is inside io_uring_enter, so taking
      // the lock here orders the submitter's writes to the Operation before its completion.
      std::lock_guard guard(r.sq_mutex);
    }
    return count;
  }

  void wake(int poller) noexcept override {
    Ring& r = *rings_[static_cast<std::size_t>(poller)];
    std::lock_guard guard(r.sq_mutex);
    io_uring_sqe* sqe = r.get_sqe();
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, kIgnore);
    r.submit_locked();
  }

 private:
  // A CQE for op: free its slot, then complete it (the slot must be free first so the
  // resumed coroutine can start its next operation on this side).
  static void complete(const sched::Event& event, sched::Disposition) noexcept {
    auto* op = static_cast<Operation*>(event.target);
    auto* self = reinterpret_cast<UringEngine*>(static_cast<std::uintptr_t>(event.data));
    Descriptor& d = *op->descriptor;
    Descriptor::Finish finish;
    {
      std::lock_guard guard(d.lock);
      d.slot[Descriptor::side(op->kind)] = nullptr;
      finish = d.finish_if_closed();
    }
    self->finish_close(&d, finish);
    SubmitBatch batch;  // recvmsg already wrote a receive_from peer into op.address
    op->complete(*op, event.result);
  }

  void finish_close(Descriptor* d, const Descriptor::Finish& finish) noexcept {
    if (finish.close_fd != kInvalidHandle) {
      ::close(static_cast<int>(finish.close_fd));
      descriptors_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (finish.release) pool_.release(d);
  }

  std::vector<std::unique_ptr<Ring>> rings_;
  DescriptorPool pool_;
  std::atomic<std::uint64_t> next_ring_{0};
};

}  // namespace

Result<std::unique_ptr<Engine>> make_uring_engine(sched::Scheduler& scheduler,
                                                  const EngineOptions& options, bool announce) {
  auto engine = std::make_unique<UringEngine>(scheduler, options);
  if (auto ec = engine->init()) return ec;
  if (announce)
    log::info(
      "engine: io_uring, {} poller(s), batch {}, tree {}{}; single-shot accept and receive",
      options.pollers, options.max_batch, options.max_tree,
      options.inline_completions ? ", inline" : "");
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace arbor::io
