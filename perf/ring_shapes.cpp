// Issue 11, point 3: which shape should a ring take when the workers poll? A TCP echo server on
// raw liburing (no arbor), T threads, in two shapes that differ in nothing else:
//
//   --shape shared      one ring (COOP_TASKRUN, as arbor's workers mode); a thread takes the
//                       poll right (an atomic flag), submits what the others queued, waits for
//                       CQEs, reaps up to kReap, releases the right and runs the first CQE itself;
//                       the rest go to a shared run queue. Others park on a futex semaphore. The
//                       same protocol as arbor's scheduler and UringEngine, cut to the bone:
//                       - requests made outside the right go to a lock-protected submit queue; at
//                         the end of its batch a thread takes the right if free and submits them
//                         itself, else writes the ring's eventfd if the holder sleeps in the
//                         kernel (a Dekker pair on `sleeping` and `pending`), as SubmitBatch does;
//                       - every release of the right hands the kernel over: it wakes a parked
//                         thread if there is one (it takes the right and waits in the kernel, or
//                         finds the holder's surplus in the run queue); a holder woken only to
//                         submit keeps the right and waits again. Unlike arbor, no spin before
//                         parking.
//   --shape per-thread  a ring per thread (SINGLE_ISSUER | DEFER_TASKRUN, falling back to
//                       COOP_TASKRUN, then basic), each thread the only submitter and reaper of
//                       its ring. One listener, on thread 0's ring: each accepted connection goes
//                       round-robin to a thread, sent to that thread's ring with IORING_OP_MSG_RING
//                       (exact balance, as the Asio baseline's round-robin; SO_REUSEPORT hashes
//                       the 4-tuple, which with 100 connections splits them unevenly, and arbor has
//                       one descriptor per listener). A connection stays on its ring for life.
//
// Both shapes: multishot accept, single-shot recv into a per-connection 4 KiB buffer, single-shot
// send of what came in (the rest resubmitted on a short send), then the next recv. With
// --recv multishot, arbor's own receive path instead: one multishot receive per connection into
// provided buffers (1024 x 4 KiB per ring) and the reply sent at once with MSG_DONTWAIT, the ring
// taking only what the socket refuses; then an echo submits nothing to the ring. (In the shared
// shape two threads may then run two CQEs of one connection at once: a per-connection lock and
// a count of held CQEs keep that safe, but not the bytes' order across the two, which an echo
// with one message in flight, as echo_load sends, never needs.)
//
//   ring_shapes [--shape shared|per-thread] [--threads T] [--port P] [--recv single|multishot]
//               [--busy-us N] [--look-every N]
//
// --busy-us N: every 100th message a thread handles burns N µs of CPU before its reply (an
// uneven request). Prints "ready <port>" once listening; runs until killed.
#include <fcntl.h>
#include <liburing.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kEntries = 1024;
constexpr unsigned kCqEntries = 4096;
constexpr unsigned kReap = 64;  // CQEs reaped per wait, in both shapes
constexpr unsigned kBufferSize = 4096;

// user_data: a pointer (8-aligned) or nothing, with the operation in the low three bits.
enum Op : std::uint64_t {
  kAccept = 1,
  kRecv = 2,
  kSend = 3,
  kWake = 4,
  kNewConn = 5,
  kMsgSent = 6
};

struct Options {
  bool shared = true;
  bool steal = false;  // --shape per-thread-steal
  int threads = 2;
  int port = 0;
  int busy_us = 0;
  int look_every = 1;      // per-thread-steal: items between two looks into the owner's ring
  bool multishot = false;  // --recv multishot: provided buffers and a direct send
};
Options options;
int listener = -1;

[[noreturn]] void die(const char* what, int err) {
  std::fprintf(stderr, "ring_shapes: %s: %s\n", what, std::strerror(err));
  std::_Exit(1);  // no static destructors under the other threads' feet
}

struct alignas(8) Conn {
  int fd;
  int owner = 0;      // per-thread-steal: the index of the ring the connection lives on
  unsigned len = 0;   // bytes received, to echo
  unsigned sent = 0;  // of which sent so far
  // --recv multishot: a connection's CQEs may be run by two threads at once in the shared shape.
  std::mutex lock;
  bool send_pending = false;  // a ring send of `sending` is in flight
  std::vector<char> sending;  // what the direct send left, in the ring's send
  std::vector<char> backlog;  // bytes received while that send is in flight
  bool recv_ended = false;    // the multishot receive ended for good
  // Shared shape: CQEs reaped and not yet run. Counted in CQE order under the poll right, so a
  // connection outlives every CQE of it that a thread still holds (its EOF may be run before a
  // data CQE another thread took from the run queue).
  std::atomic<int> held{0};
  char buf[kBufferSize];
};

// --recv multishot: a ring's provided buffers (group 0). In the shared shape any thread gives a
// buffer back, under `lock`; a ring of its own has one thread and needs none.
struct Buffers {
  static constexpr unsigned kCount = 1024;
  io_uring_buf_ring* ring = nullptr;
  std::unique_ptr<char[]> memory;
  std::mutex lock;
  bool locked = false;

  void init(io_uring& r, bool shared_ring) {
    locked = shared_ring;
    const std::size_t bytes = kCount * sizeof(io_uring_buf);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
    if (p == MAP_FAILED) die("mmap", errno);
    ring = static_cast<io_uring_buf_ring*>(p);
    io_uring_buf_ring_init(ring);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uint64_t>(ring);
    reg.ring_entries = kCount;
    reg.bgid = 0;
    if (const int e = io_uring_register_buf_ring(&r, &reg, 0); e < 0)
      die("io_uring_register_buf_ring", -e);
    memory = std::make_unique<char[]>(std::size_t{kCount} * kBufferSize);
    for (unsigned id = 0; id < kCount; ++id)
      io_uring_buf_ring_add(ring, data(id), kBufferSize, static_cast<unsigned short>(id),
                            io_uring_buf_ring_mask(kCount), static_cast<int>(id));
    io_uring_buf_ring_advance(ring, kCount);
  }
  char* data(unsigned id) { return memory.get() + std::size_t{id} * kBufferSize; }
  void give_back(unsigned id) {
    std::unique_lock guard(lock, std::defer_lock);
    if (locked) guard.lock();
    io_uring_buf_ring_add(ring, data(id), kBufferSize, static_cast<unsigned short>(id),
                          io_uring_buf_ring_mask(kCount), 0);
    io_uring_buf_ring_advance(ring, 1);
  }
};

struct Req {
  Conn* conn;  // null for the listener's accept
  Op op;
};

struct Cqe {
  std::uint64_t data;
  int res;
  unsigned flags;
};

Op op_of(std::uint64_t data) {
  return static_cast<Op>(data & 7);
}
Conn* conn_of(std::uint64_t data) {
  return reinterpret_cast<Conn*>(static_cast<std::uintptr_t>(data & ~std::uint64_t{7}));
}
std::uint64_t tag(Conn* c, Op op) {
  return reinterpret_cast<std::uintptr_t>(c) | op;
}

io_uring_sqe* get_sqe(io_uring& ring) {
  for (;;) {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring)) return sqe;
    const int e = io_uring_submit(&ring);  // SQ full: make room
    if (e < 0 && e != -EINTR && e != -EAGAIN && e != -EBUSY) die("io_uring_submit", -e);
  }
}

void prep(io_uring& ring, const Req& r) {
  io_uring_sqe* sqe = get_sqe(ring);
  switch (r.op) {
    case kAccept:
      io_uring_prep_multishot_accept(sqe, listener, nullptr, nullptr, SOCK_CLOEXEC);
      break;
    case kRecv:
      if (options.multishot) {
        io_uring_prep_recv_multishot(sqe, r.conn->fd, nullptr, 0, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = 0;
      } else {
        io_uring_prep_recv(sqe, r.conn->fd, r.conn->buf, kBufferSize, 0);
      }
      break;
    case kSend:
      if (options.multishot)
        io_uring_prep_send(sqe, r.conn->fd, r.conn->sending.data() + r.conn->sent,
                           r.conn->sending.size() - r.conn->sent, MSG_NOSIGNAL);
      else
        io_uring_prep_send(sqe, r.conn->fd, r.conn->buf + r.conn->sent, r.conn->len - r.conn->sent,
                           MSG_NOSIGNAL);
      break;
    default:
      die("prep", EINVAL);
  }
  io_uring_sqe_set_data64(sqe, tag(r.conn, r.op));
}

void burn(int us) {
  const auto end = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < end) {
  }
}

Conn* new_conn(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY", errno);
  auto* c = new Conn;
  c->fd = fd;
  return c;
}

void close_conn(Conn* c) {
  ::close(c->fd);
  delete c;
}

// --recv multishot, after a CQE of `c` ran (its lock held in the shared shape): the connection
// goes once its receive has ended, no send is in flight and no other thread holds a CQE of it.
void release(Conn* c, Buffers& buffers, std::unique_lock<std::mutex>& guard) {
  const bool last = !buffers.locked || c->held.fetch_sub(1, std::memory_order_acq_rel) == 1;
  const bool done = last && c->recv_ended && !c->send_pending;
  if (guard.owns_lock()) guard.unlock();
  if (done) close_conn(c);
}

// --recv multishot: a receive's CQE. The bytes are sent at once with MSG_DONTWAIT, as arbor
// sends; what the socket does not take goes to the ring, and bytes arriving meanwhile queue
// behind it. Shared shape: under the connection's lock (two threads may run its CQEs at once).
template <class Emit>
void handle_multishot_recv(const Cqe& e, unsigned& count, Buffers& buffers, Emit&& emit) {
  Conn* c = conn_of(e.data);
  std::unique_lock guard(c->lock, std::defer_lock);
  if (buffers.locked) guard.lock();
  if (e.res > 0) {
    if (!(e.flags & IORING_CQE_F_BUFFER)) die("multishot receive without a buffer", EINVAL);
    const unsigned id = e.flags >> IORING_CQE_BUFFER_SHIFT;
    const char* p = buffers.data(id);
    const auto n = static_cast<unsigned>(e.res);
    if (options.busy_us > 0 && ++count % 100 == 0) burn(options.busy_us);
    if (c->send_pending) {
      c->backlog.insert(c->backlog.end(), p, p + n);
    } else {
      const ssize_t w = ::send(c->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
      const unsigned done = w > 0 ? static_cast<unsigned>(w) : 0;
      if (w < 0 && errno != EAGAIN) ::shutdown(c->fd, SHUT_RDWR);  // the receive ends with it
      if (done < n) {
        c->sending.assign(p + done, p + n);
        c->sent = 0;
        c->send_pending = true;
        emit(Req{c, kSend});
      }
    }
    buffers.give_back(id);
  }
  if (!(e.flags & IORING_CQE_F_MORE)) {
    if (e.res > 0 || e.res == -ENOBUFS)  // stopped, not finished: arm it again
      emit(Req{c, kRecv});
    else
      c->recv_ended = true;
  }
  release(c, buffers, guard);
}

// --recv multishot: a ring send of what the direct send left.
template <class Emit>
void handle_multishot_send(const Cqe& e, Buffers& buffers, Emit&& emit) {
  Conn* c = conn_of(e.data);
  std::unique_lock guard(c->lock, std::defer_lock);
  if (buffers.locked) guard.lock();
  if (e.res < 0) {
    ::shutdown(c->fd, SHUT_RDWR);
    c->sending.clear();
    c->backlog.clear();
    c->sent = 0;
  } else {
    c->sent += static_cast<unsigned>(e.res);
  }
  if (c->sent == c->sending.size()) {  // all sent: the backlog is next
    c->sending.swap(c->backlog);
    c->backlog.clear();
    c->sent = 0;
  }
  if (c->sending.empty()) {
    c->send_pending = false;
  } else {
    emit(Req{c, kSend});
  }
  release(c, buffers, guard);
}

// The echo, the same in both shapes: `emit` queues the next request, `accepted` takes a new
// connection's descriptor. `count` is the thread's message count, for --busy-us.
template <class Emit, class Accepted>
void handle(const Cqe& e, unsigned& count, Buffers& buffers, Emit&& emit, Accepted&& accepted) {
  if (options.multishot && op_of(e.data) == kRecv)
    return handle_multishot_recv(e, count, buffers, emit);
  if (options.multishot && op_of(e.data) == kSend) return handle_multishot_send(e, buffers, emit);
  switch (op_of(e.data)) {
    case kAccept:
      if (e.res < 0) die("accept", -e.res);
      if (!(e.flags & IORING_CQE_F_MORE)) emit(Req{nullptr, kAccept});  // the multishot ended
      accepted(e.res);
      return;
    case kRecv: {
      Conn* c = conn_of(e.data);
      if (e.res <= 0) {  // peer closed (0) or reset
        close_conn(c);
        return;
      }
      c->len = static_cast<unsigned>(e.res);
      c->sent = 0;
      if (options.busy_us > 0 && ++count % 100 == 0) burn(options.busy_us);
      emit(Req{c, kSend});
      return;
    }
    case kSend: {
      Conn* c = conn_of(e.data);
      if (e.res < 0) {
        close_conn(c);
        return;
      }
      c->sent += static_cast<unsigned>(e.res);
      emit(Req{c, c->sent < c->len ? kSend : kRecv});
      return;
    }
    default:
      die("unexpected completion", EINVAL);
  }
}

// Sets `ring` up with the first of `flags` the kernel accepts; returns its name.
// `taskrun_flag` (per-thread-steal) also asks for IORING_SQ_TASKRUN in the SQ ring's flags while
// deferred completions wait: "is anything pending?" is then one load, no system call.
const char* init_ring(io_uring& ring, bool per_thread, bool taskrun_flag = false) {
  struct Attempt {
    unsigned flags;
    const char* name;
  };
  const Attempt per_thread_attempts[] = {
      {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
       "single-issuer, deferred task work, taskrun flag"},
      {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
       "single-issuer, deferred task work"},
      {IORING_SETUP_COOP_TASKRUN, "cooperative task work"},
      {0, "basic"}};
  const Attempt shared_attempts[] = {{IORING_SETUP_COOP_TASKRUN, "cooperative task work"},
                                     {0, "basic"}};
  const Attempt* a = per_thread ? per_thread_attempts + (taskrun_flag ? 0 : 1) : shared_attempts;
  const int n = per_thread ? (taskrun_flag ? 4 : 3) : 2;
  int e = 0;
  for (int i = 0; i < n; ++i) {
    io_uring_params p{};
    p.flags = a[i].flags | IORING_SETUP_CQSIZE;
    p.cq_entries = kCqEntries;
    e = io_uring_queue_init_params(kEntries, &ring, &p);
    if (e == 0) return a[i].name;
    if (e != -EINVAL) break;
  }
  die("io_uring_queue_init_params", -e);
}

// Waits for at least `min` CQEs (0: only submits), retrying on the benign errors.
void submit_and_wait(io_uring& ring, unsigned min) {
  for (;;) {
    const int e = min == 0 ? io_uring_submit(&ring) : io_uring_submit_and_wait(&ring, min);
    if (e >= 0 || e == -ETIME) return;
    if (e == -EINTR) continue;
    if (e == -EAGAIN || e == -EBUSY) return;  // CQ overflow pending: reap first
    die("io_uring_submit_and_wait", -e);
  }
}

// Copies up to kReap CQEs out of the ring and advances it.
unsigned reap(io_uring& ring, Cqe* out) {
  io_uring_cqe* cqes[kReap];
  const unsigned n = io_uring_peek_batch_cqe(&ring, cqes, kReap);
  for (unsigned i = 0; i < n; ++i)
    out[i] = {io_uring_cqe_get_data64(cqes[i]), cqes[i]->res, cqes[i]->flags};
  io_uring_cq_advance(&ring, n);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Per-thread rings.

struct RingThread {
  io_uring ring{};
  Buffers buffers;
  unsigned count = 0;
};
std::vector<std::unique_ptr<RingThread>> ring_threads;

void run_per_thread(int index, std::latch& ready) {
  RingThread& self = *ring_threads[static_cast<std::size_t>(index)];
  // Created on the thread that uses it: a single-issuer ring belongs to its creator.
  const char* mode = init_ring(self.ring, /*per_thread=*/true);
  if (options.multishot) self.buffers.init(self.ring, /*shared_ring=*/false);
  if (index == 0) std::fprintf(stderr, "ring_shapes: per-thread rings, %s\n", mode);
  ready.arrive_and_wait();  // every ring exists before the first MSG_RING names one
  io_uring& ring = self.ring;
  unsigned next = 0;  // round-robin over the threads, on thread 0 (the acceptor)
  auto emit = [&](const Req& r) { prep(ring, r); };
  auto accepted = [&](int fd) {
    const unsigned to = next++ % static_cast<unsigned>(options.threads);
    if (to == 0) {
      emit(Req{new_conn(fd), kRecv});
      return;
    }
    io_uring_sqe* sqe = get_sqe(ring);
    io_uring_prep_msg_ring(sqe, ring_threads[to]->ring.ring_fd, static_cast<unsigned>(fd), kNewConn,
                           0);
    io_uring_sqe_set_data64(sqe, kMsgSent);
  };
  if (index == 0) emit(Req{nullptr, kAccept});
  Cqe cqes[kReap];
  for (;;) {
    submit_and_wait(ring, 1);
    const unsigned n = reap(ring, cqes);
    for (unsigned i = 0; i < n; ++i) {
      const Cqe& e = cqes[i];
      if (op_of(e.data) == kMsgSent) {
        if (e.res < 0) die("IORING_OP_MSG_RING", -e.res);
      } else if (op_of(e.data) == kNewConn) {  // a connection handed to us; res = its fd
        emit(Req{new_conn(e.res), kRecv});
      } else {
        handle(e, self.count, self.buffers, emit, accepted);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Per-thread rings with stealing (--shape per-thread-steal): the ring per worker that issue 11's
// measurements recommend, with the cure they propose for a busy owner. Each thread owns its
// ring as in per-thread, and additionally:
//   - what it reaps goes to its run queue; it runs the front, and after every item it looks into
//     its ring when the kernel says completions wait (IORING_SQ_TASKRUN: one load, no system
//     call) or other threads left requests for it;
//   - a thread with nothing to run steals half of another's run queue (from the back) before it
//     sleeps in its own ring, and an owner that reaps a surplus wakes a sleeping thread with
//     IORING_OP_MSG_RING to come and steal it;
//   - a thief runs a connection's CQE where it is (a direct send works from any thread) and sends
//     what needs the owner's ring (a re-arm, a refused send) to the owner's request queue, with a
//     MSG_RING wake if the owner sleeps in its ring (a Dekker pair on `sleeping` and `pending`).
// What this cannot do is reap a busy or preempted owner's ring: with DEFER_TASKRUN its
// completions exist only after the owner's next io_uring_enter.

struct StealThread {
  io_uring ring{};
  Buffers buffers;  // locked: a thief gives buffers back too
  unsigned count = 0;
  std::mutex run_lock;
  std::deque<Cqe> run_queue;   // the owner takes the front, thieves the back half
  std::atomic<int> queued{0};  // run_queue.size()
  std::mutex request_lock;
  std::vector<Req> requests;          // made by other threads for this ring
  std::atomic<int> pending{0};        // requests.size()
  std::atomic<bool> sleeping{false};  // the owner waits in io_uring_enter
};
std::vector<std::unique_ptr<StealThread>> steal_threads;
std::atomic<unsigned> next_ring{0};  // new connections go round-robin over the rings

// Stats for a manual check (RING_SHAPES_STATS=1 prints them every second to stderr).
std::atomic<unsigned long> stat_looks{0}, stat_stolen{0}, stat_wakes{0}, stat_routed{0};

// Sends a MSG_RING CQE to `target`'s ring from `self`'s, which wakes it out of io_uring_enter.
void wake_ring(StealThread& self, StealThread& target) {
  io_uring_sqe* sqe = get_sqe(self.ring);
  io_uring_prep_msg_ring(sqe, target.ring.ring_fd, 0, kWake, 0);
  io_uring_sqe_set_data64(sqe, kMsgSent);
  submit_and_wait(self.ring, 0);
  stat_wakes.fetch_add(1, std::memory_order_relaxed);
}

// A request goes to the connection's ring: prepared here if it is ours, else queued for the owner.
void route(int index, const Req& r) {
  const int owner = r.conn ? r.conn->owner : 0;  // the listener lives on ring 0
  StealThread& self = *steal_threads[static_cast<std::size_t>(index)];
  if (owner == index) {
    prep(self.ring, r);
    return;
  }
  StealThread& o = *steal_threads[static_cast<std::size_t>(owner)];
  {
    std::lock_guard guard(o.request_lock);
    o.requests.push_back(r);
  }
  // seq_cst pairs with the owner's store of `sleeping` then load of `pending` (sleep_in_ring):
  // either it sees the request or we see it sleeping.
  o.pending.fetch_add(1, std::memory_order_seq_cst);
  stat_routed.fetch_add(1, std::memory_order_relaxed);
  if (o.sleeping.load(std::memory_order_seq_cst) &&
      o.sleeping.exchange(false, std::memory_order_seq_cst))
    wake_ring(self, o);
}

// Owner: prepares what other threads asked for. True if there was anything.
bool drain_requests(StealThread& self, std::vector<Req>& scratch) {
  if (self.pending.load(std::memory_order_seq_cst) == 0) return false;
  {
    std::lock_guard guard(self.request_lock);
    scratch.swap(self.requests);
    self.pending.store(0, std::memory_order_relaxed);
  }
  for (const Req& r : scratch)
    prep(self.ring, r);
  const bool any = !scratch.empty();
  scratch.clear();
  return any;
}

bool someone_may_steal(int index) {
  for (std::size_t i = 0; i < steal_threads.size(); ++i)
    if (static_cast<int>(i) != index &&
        steal_threads[i]->queued.load(std::memory_order_seq_cst) > 1)
      return true;
  return false;
}

// Owner: moves what its ring completed to its run queue; a surplus wakes a sleeping thread.
void reap_into(int index) {
  StealThread& self = *steal_threads[static_cast<std::size_t>(index)];
  Cqe cqes[kReap];
  const unsigned n = reap(self.ring, cqes);
  unsigned kept = 0;
  for (unsigned i = 0; i < n; ++i) {
    const Op op = op_of(cqes[i].data);
    if (op == kWake) continue;
    if (op == kMsgSent) {
      if (cqes[i].res < 0) die("IORING_OP_MSG_RING", -cqes[i].res);
      continue;
    }
    // Counted in CQE order, by the reaper, so a connection outlives every CQE a thief holds.
    if (options.multishot && (op == kRecv || op == kSend))
      conn_of(cqes[i].data)->held.fetch_add(1, std::memory_order_relaxed);
    cqes[kept++] = cqes[i];
  }
  if (kept == 0) return;
  {
    std::lock_guard guard(self.run_lock);
    self.run_queue.insert(self.run_queue.end(), cqes, cqes + kept);
  }
  const int queued = self.queued.fetch_add(static_cast<int>(kept), std::memory_order_seq_cst) +
                     static_cast<int>(kept);
  if (queued < 2) return;  // the owner runs it next: nothing to hand out
  for (std::size_t i = 0; i < steal_threads.size(); ++i) {
    StealThread& t = *steal_threads[i];
    if (static_cast<int>(i) != index && t.sleeping.load(std::memory_order_seq_cst) &&
        t.sleeping.exchange(false, std::memory_order_seq_cst)) {
      wake_ring(self, t);
      return;
    }
  }
}

// Owner, between items: takes what completed if the kernel says anything waits.
void look(int index, std::vector<Req>& scratch) {
  StealThread& self = *steal_threads[static_cast<std::size_t>(index)];
  const bool asked = drain_requests(self, scratch);
  const unsigned sq_flags = IO_URING_READ_ONCE(*self.ring.sq.kflags);
  if (!asked && !(sq_flags & IORING_SQ_TASKRUN) && io_uring_cq_ready(&self.ring) == 0) return;
  stat_looks.fetch_add(1, std::memory_order_relaxed);
  for (;;) {
    const int e = io_uring_submit_and_get_events(&self.ring);
    if (e >= 0 || e == -EAGAIN || e == -EBUSY) break;
    if (e != -EINTR) die("io_uring_submit_and_get_events", -e);
  }
  reap_into(index);
}

bool pop_front(StealThread& t, Cqe& out) {
  if (t.queued.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard guard(t.run_lock);
  if (t.run_queue.empty()) return false;
  out = t.run_queue.front();
  t.run_queue.pop_front();
  t.queued.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

// Takes the back half of another thread's run queue (only where two or more wait: the front is
// its owner's next item) into ours.
bool steal(int index) {
  StealThread& self = *steal_threads[static_cast<std::size_t>(index)];
  const std::size_t n = steal_threads.size();
  for (std::size_t k = 1; k < n; ++k) {
    StealThread& v = *steal_threads[(static_cast<std::size_t>(index) + k) % n];
    if (v.queued.load(std::memory_order_relaxed) < 2) continue;
    std::vector<Cqe> taken;
    {
      std::lock_guard guard(v.run_lock);
      const std::size_t take = v.run_queue.size() / 2;
      if (take == 0) continue;
      taken.assign(v.run_queue.end() - static_cast<std::ptrdiff_t>(take), v.run_queue.end());
      v.run_queue.erase(v.run_queue.end() - static_cast<std::ptrdiff_t>(take), v.run_queue.end());
      v.queued.fetch_sub(static_cast<int>(take), std::memory_order_relaxed);
    }
    {
      std::lock_guard guard(self.run_lock);
      self.run_queue.insert(self.run_queue.end(), taken.begin(), taken.end());
    }
    self.queued.fetch_add(static_cast<int>(taken.size()), std::memory_order_seq_cst);
    stat_stolen.fetch_add(taken.size(), std::memory_order_relaxed);
    return true;
  }
  return false;
}

// Owner, with nothing to run or steal: submits and waits in its ring, unless a request or a
// stealable surplus appeared after it looked (the other half of the Dekker pairs).
void sleep_in_ring(int index, std::vector<Req>& scratch) {
  StealThread& self = *steal_threads[static_cast<std::size_t>(index)];
  drain_requests(self, scratch);
  self.sleeping.store(true, std::memory_order_seq_cst);
  if (self.pending.load(std::memory_order_seq_cst) > 0 || someone_may_steal(index)) {
    self.sleeping.store(false, std::memory_order_relaxed);
    return;
  }
  submit_and_wait(self.ring, 1);
  self.sleeping.store(false, std::memory_order_seq_cst);
  reap_into(index);
}

void run_stealing(int index, std::latch& ready) {
  StealThread& self = *steal_threads[static_cast<std::size_t>(index)];
  const char* mode = init_ring(self.ring, /*per_thread=*/true, /*taskrun_flag=*/true);
  if (options.multishot) self.buffers.init(self.ring, /*shared_ring=*/true);
  if (index == 0) std::fprintf(stderr, "ring_shapes: per-thread rings with stealing, %s\n", mode);
  ready.arrive_and_wait();  // every ring exists before the first request names one
  std::vector<Req> scratch;
  auto emit = [&](const Req& r) { route(index, r); };
  auto accepted = [&](int fd) {
    Conn* c = new_conn(fd);
    c->owner = static_cast<int>(next_ring.fetch_add(1, std::memory_order_relaxed) %
                                static_cast<unsigned>(options.threads));
    route(index, Req{c, kRecv});
  };
  if (index == 0) prep(self.ring, Req{nullptr, kAccept});
  int since_look = 0;
  for (;;) {
    Cqe item;
    if (pop_front(self, item)) {
      Conn* c = op_of(item.data) == kAccept ? nullptr : conn_of(item.data);
      Buffers& buffers =
          c ? steal_threads[static_cast<std::size_t>(c->owner)]->buffers : self.buffers;
      handle(item, self.count, buffers, emit, accepted);
      if (++since_look >= options.look_every) {
        since_look = 0;
        look(index, scratch);
      }
      continue;
    }
    if (steal(index)) continue;
    sleep_in_ring(index, scratch);
  }
}

// ---------------------------------------------------------------------------------------------
// One shared ring and a poll right.

void futex_wait(std::atomic<int>* word, int expected) {
  ::syscall(SYS_futex, reinterpret_cast<int*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr,
            0);
}
void futex_wake(std::atomic<int>* word, int n) {
  ::syscall(SYS_futex, reinterpret_cast<int*>(word), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}

// A counting semaphore on a futex: post() makes a system call only if someone waits.
class Semaphore {
 public:
  void post() {
    count_.fetch_add(1, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) > 0) futex_wake(&count_, 1);
  }
  void wait() {
    for (;;) {
      int c = count_.load(std::memory_order_relaxed);
      while (c > 0)
        if (count_.compare_exchange_weak(c, c - 1, std::memory_order_acquire)) return;
      waiters_.fetch_add(1, std::memory_order_seq_cst);
      futex_wait(&count_, 0);
      waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
  }

 private:
  std::atomic<int> count_{0};
  std::atomic<int> waiters_{0};
};

struct SharedRing {
  io_uring ring{};
  Buffers buffers;
  int eventfd = -1;
  std::uint64_t eventfd_value = 0;
  bool wake_read_posted = false;  // only the holder of the right touches the ring's state
  std::atomic<bool> right{false};
  std::atomic<bool> sleeping{false};  // the holder waits in the kernel
  std::mutex submit_lock;
  std::vector<Req> submit_queue;
  std::atomic<int> pending{0};  // submit_queue.size()
  std::mutex run_lock;
  std::deque<Cqe> run_queue;
  std::atomic<int> queued{0};  // run_queue.size()
  std::atomic<int> parked{0};  // threads on the semaphore not yet claimed by a waker
  Semaphore sleepers;
};
SharedRing shared;

bool try_take_right() {
  return !shared.right.load(std::memory_order_relaxed) &&
         !shared.right.exchange(true, std::memory_order_seq_cst);
}

// Claims one parked thread, if any, and wakes it.
void wake_one() {
  int p = shared.parked.load(std::memory_order_seq_cst);
  while (p > 0)
    if (shared.parked.compare_exchange_weak(p, p - 1, std::memory_order_seq_cst)) {
      shared.sleepers.post();
      return;
    }
}

// Every release hands the kernel over: a parked thread takes the right (or the surplus).
void release_right() {
  shared.right.store(false, std::memory_order_seq_cst);
  wake_one();
}

void drain_submit_queue(std::vector<Req>& scratch) {
  {
    std::lock_guard guard(shared.submit_lock);
    scratch.swap(shared.submit_queue);
    shared.pending.store(0, std::memory_order_relaxed);
  }
  for (const Req& r : scratch)
    prep(shared.ring, r);
  scratch.clear();
}

// The end of a thread's batch: its requests go to the ring, submitted by this thread if the
// right is free, else by the holder (woken through the eventfd if it sleeps in the kernel).
void flush(std::vector<Req>& out, std::vector<Req>& scratch) {
  {
    std::lock_guard guard(shared.submit_lock);
    shared.submit_queue.insert(shared.submit_queue.end(), out.begin(), out.end());
    shared.pending.fetch_add(static_cast<int>(out.size()), std::memory_order_seq_cst);
  }
  out.clear();
  if (try_take_right()) {
    drain_submit_queue(scratch);
    submit_and_wait(shared.ring, 0);
    release_right();
  } else if (shared.sleeping.load(std::memory_order_seq_cst)) {
    const std::uint64_t one = 1;
    if (::write(shared.eventfd, &one, sizeof one) != sizeof one) die("eventfd write", errno);
  }
}

// Holding the right, before waiting in the kernel: keep an eventfd read posted (the wake),
// drain the submit queue, announce the sleep, and drain again if a request arrived meanwhile.
void prepare_to_wait(std::vector<Req>& scratch) {
  if (!shared.wake_read_posted) {
    io_uring_sqe* sqe = get_sqe(shared.ring);
    io_uring_prep_read(sqe, shared.eventfd, &shared.eventfd_value, sizeof shared.eventfd_value, 0);
    io_uring_sqe_set_data64(sqe, kWake);
    shared.wake_read_posted = true;
  }
  for (;;) {
    drain_submit_queue(scratch);
    shared.sleeping.store(true, std::memory_order_seq_cst);
    if (shared.pending.load(std::memory_order_seq_cst) == 0) return;
    shared.sleeping.store(false, std::memory_order_relaxed);
  }
}

// Holding the right: submit, wait for CQEs, reap, release, keep the first, share the rest.
void poll(std::vector<Cqe>& local, std::vector<Req>& scratch) {
  io_uring& ring = shared.ring;
  Cqe cqes[kReap];
  unsigned kept = 0;
  for (;;) {
    prepare_to_wait(scratch);
    const bool wait = shared.queued.load(std::memory_order_seq_cst) == 0;
    submit_and_wait(ring, wait ? 1 : 0);
    shared.sleeping.store(false, std::memory_order_relaxed);
    const unsigned n = reap(ring, cqes);
    for (unsigned i = 0; i < n; ++i) {
      if (op_of(cqes[i].data) == kWake) {
        if (cqes[i].res < 0) die("eventfd read", -cqes[i].res);
        shared.wake_read_posted = false;
        continue;
      }
      if (options.multishot && (op_of(cqes[i].data) == kRecv || op_of(cqes[i].data) == kSend))
        conn_of(cqes[i].data)->held.fetch_add(1, std::memory_order_relaxed);
      cqes[kept++] = cqes[i];
    }
    // Woken only to submit (the eventfd) and nothing reaped: keep the right and wait again, as
    // arbor's holder parks back into the driver without handing over.
    if (kept > 0 || !wait) break;
  }
  if (kept > 1) {
    std::lock_guard guard(shared.run_lock);
    shared.run_queue.insert(shared.run_queue.end(), cqes + 1, cqes + kept);
    shared.queued.fetch_add(static_cast<int>(kept - 1), std::memory_order_seq_cst);
  }
  if (kept > 0) local.push_back(cqes[0]);
  release_right();  // hands the kernel (and any surplus) to a parked thread
}

// Takes a fair share of the run queue.
bool take_shared_work(std::vector<Cqe>& local) {
  if (shared.queued.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard guard(shared.run_lock);
  const std::size_t size = shared.run_queue.size();
  if (size == 0) return false;
  const std::size_t take =
      std::max<std::size_t>(1, std::min<std::size_t>(size / options.threads, kReap));
  for (std::size_t i = 0; i < take; ++i) {
    local.push_back(shared.run_queue.front());
    shared.run_queue.pop_front();
  }
  shared.queued.fetch_sub(static_cast<int>(take), std::memory_order_relaxed);
  return true;
}

void park() {
  shared.parked.fetch_add(1, std::memory_order_seq_cst);
  // Work or a free right may have appeared after we looked, and its releaser may have seen us
  // awake: then we wake ourselves (claiming a parked count keeps the semaphore's books).
  if (!shared.right.load(std::memory_order_seq_cst) ||
      shared.queued.load(std::memory_order_seq_cst) > 0)
    wake_one();
  shared.sleepers.wait();
}

void run_shared() {
  std::vector<Cqe> local;
  std::vector<Req> out, scratch;
  unsigned count = 0;
  auto emit = [&](const Req& r) { out.push_back(r); };
  auto accepted = [&](int fd) { emit(Req{new_conn(fd), kRecv}); };
  for (;;) {
    for (std::size_t i = 0; i < local.size(); ++i)
      handle(local[i], count, shared.buffers, emit, accepted);
    local.clear();
    if (!out.empty()) flush(out, scratch);
    if (take_shared_work(local)) continue;
    if (try_take_right()) {
      poll(local, scratch);
      continue;
    }
    park();
  }
}

int make_listener(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket", errno);
  const int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) die("SO_REUSEADDR", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind", errno);
  if (::listen(fd, 1024) != 0) die("listen", errno);
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) die("getsockname", errno);
  options.port = ntohs(a.sin_port);
  return fd;
}

void usage() {
  std::fprintf(
      stderr,
      "usage: ring_shapes [--shape shared|per-thread|per-thread-steal] [--threads T] [--port P] "
      "[--recv single|multishot] [--busy-us N] [--look-every N]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage();
    const std::string v = argv[++i];
    if (a == "--shape" && (v == "shared" || v == "per-thread" || v == "per-thread-steal")) {
      options.shared = v == "shared";
      options.steal = v == "per-thread-steal";
    } else if (a == "--threads") {
      options.threads = std::atoi(v.c_str());
    } else if (a == "--port") {
      options.port = std::atoi(v.c_str());
    } else if (a == "--recv" && (v == "single" || v == "multishot")) {
      options.multishot = v == "multishot";
    } else if (a == "--look-every" && std::atoi(v.c_str()) >= 1) {
      options.look_every = std::atoi(v.c_str());
    } else if (a == "--busy-us") {
      options.busy_us = std::atoi(v.c_str());
    } else {
      usage();
    }
  }
  if (options.threads < 1) usage();
  listener = make_listener(options.port);

  std::vector<std::thread> threads;
  std::latch ready(options.threads + 1);  // per-thread: every ring exists before the first accept
  if (options.shared) {
    std::fprintf(stderr, "ring_shapes: shared ring, %s\n", init_ring(shared.ring, false));
    if (options.multishot) shared.buffers.init(shared.ring, /*shared_ring=*/true);
    shared.eventfd = ::eventfd(0, EFD_CLOEXEC);
    if (shared.eventfd < 0) die("eventfd", errno);
    // Armed by the first holder, a worker: the kernel runs a request's task work on its submitter.
    shared.submit_queue.push_back(Req{nullptr, kAccept});
    shared.pending.store(1);
    for (int i = 0; i < options.threads; ++i)
      threads.emplace_back(run_shared);
    std::printf("ready %d\n", options.port);
    std::fflush(stdout);
  } else if (options.steal) {
    for (int i = 0; i < options.threads; ++i)
      steal_threads.push_back(std::make_unique<StealThread>());
    for (int i = 0; i < options.threads; ++i)
      threads.emplace_back([i, &ready] { run_stealing(i, ready); });
    if (std::getenv("RING_SHAPES_STATS"))
      std::thread([] {
        for (;;) {
          std::this_thread::sleep_for(std::chrono::seconds(1));
          std::fprintf(stderr, "looks %lu stolen %lu wakes %lu routed %lu\n", stat_looks.load(),
                       stat_stolen.load(), stat_wakes.load(), stat_routed.load());
        }
      }).detach();
    ready.arrive_and_wait();
    std::printf("ready %d\n", options.port);
    std::fflush(stdout);
  } else {
    for (int i = 0; i < options.threads; ++i)
      ring_threads.push_back(std::make_unique<RingThread>());
    for (int i = 0; i < options.threads; ++i)
      threads.emplace_back([i, &ready] { run_per_thread(i, ready); });
    ready.arrive_and_wait();
    std::printf("ready %d\n", options.port);
    std::fflush(stdout);
  }
  for (auto& t : threads)
    t.join();  // never: the server runs until killed
  return 0;
}
