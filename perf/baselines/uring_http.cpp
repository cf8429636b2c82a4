// The raw-liburing floor for issue 11: the least an io_uring HTTP/1.1 server can do for the
// TechEmpower plaintext and JSON tests, so perf/http/profile can set its kernel time beside
// arbor's and Asio's. No arbor, no Asio: one thread, one ring, and
//   - one multishot accept on the listener;
//   - one multishot receive per connection into provided buffers (group 0, kBufferCount x
//     kBufferSize, registered by hand: liburing 2.3 has no io_uring_setup_buf_ring);
//   - per receive completion, every complete request in it answered, and all the replies sent
//     with one send SQE (or one send(2), in direct mode);
//   - one io_uring_submit_and_wait per loop: the sends of the last batch go in with the wait.
// Parsing is the Asio baseline's: find "\r\n\r\n", route on the request line's path (GET
// /plaintext, /json; 404 otherwise), keep-alive, pipelining. Responses carry the Asio baseline's
// headers (Server, here "uring", one byte longer than "asio"; Date cached per second;
// Content-Type; Content-Length) and the JSON body comes from rapidjson's Writer, as there.
//
//   uring_http [PORT] [defer|coop|basic] [sqe|direct] [wait|timeout] [plain|fixed]
//     PORT 0 (default): any port. Prints "ready <port>" once listening, 127.0.0.1 only.
//     defer (default): IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN, falling back to basic if the
//       kernel refuses; coop: IORING_SETUP_COOP_TASKRUN (arbor's workers-mode ring); basic: none.
//     sqe (default): replies through the ring; direct: send(2) with MSG_DONTWAIT at once, the
//       ring taking only what the socket refused (arbor's way), so the two send paths can be
//       profiled apart.
//     wait (default): io_uring_submit_and_wait; timeout: io_uring_submit_and_wait_timeout with a
//       1 s timeout, as arbor's poller waits, to see what a timed wait costs the kernel.
//     plain (default): connections are ordinary descriptors; fixed: registered (direct)
//       descriptors, to measure what they save: a sparse table of kMaxFixed, the multishot accept
//       installs each connection in it (no descriptor in the process's table), every receive,
//       send and shutdown names it with IOSQE_FIXED_FILE and a close SQE ends it. TCP_NODELAY is
//       set once on the listener, which accepted sockets inherit. Not with direct sends (send(2)
//       needs a descriptor).
//
// The invariant: a connection is freed only when nothing of it is left in the kernel, that is
// when it is closing, its multishot receive has posted its last CQE (no IORING_CQE_F_MORE) and
// no send (nor, fixed mode, shutdown) of it is in flight; until then every CQE's user_data points
// at live memory, and (fixed mode) no SQE in flight names its slot when the close SQE frees it.
// A send's bytes (`sending`) are not touched while it is in flight; replies made meanwhile wait
// in `queued`. Every provided buffer is given back before the next submit, so a receive that ended
// with -ENOBUFS is re-armed with buffers to take.
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>

namespace {

constexpr unsigned kEntries = 1024;
constexpr unsigned kCqEntries = 8192;
constexpr unsigned kBufferCount = 1024;  // arbor's per-ring figures: the same cache footprint
constexpr unsigned kBufferSize = 4096;
constexpr std::size_t kMaxHead = 16 * 1024;  // the Asio baseline's read buffer
constexpr unsigned kMaxFixed = 16384;        // registered descriptors (fixed mode)

// kDone: a close SQE (fixed mode) whose result is of no use, as ::close's is not. kShut: a
// shutdown SQE (fixed mode), tracked: the kernel punts it to io-wq (REQ_F_FORCE_ASYNC), which
// looks its slot up only when it runs, so the slot must not be closed (and reused by the next
// accept, which takes the slot freed last) before it completes.
enum Op : std::uint64_t { kAccept = 1, kRecv = 2, kSend = 3, kDone = 4, kShut = 5 };

[[noreturn]] void die(const char* what, int err) {
  std::fprintf(stderr, "uring_http: %s: %s\n", what, std::strerror(err));
  std::exit(1);
}

std::string_view date() {
  static time_t second = -1;
  static char text[64];
  static std::size_t size = 0;
  timespec now{};
  clock_gettime(CLOCK_REALTIME_COARSE, &now);
  if (now.tv_sec != second) {
    second = now.tv_sec;
    tm parts{};
    gmtime_r(&second, &parts);
    size = std::strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &parts);
  }
  return {text, size};
}

struct alignas(8) Conn {
  int fd = -1;              // fixed mode: the index in the registered table
  bool recv_armed = false;  // the multishot receive may still post CQEs
  bool send_busy = false;   // a send SQE of `sending` is in flight
  bool closing = false;     // no more reading or answering; free once the kernel lets go
  bool shut = false;        // shutdown(2) called (a 400: the receive ends with EOF)
  bool shut_busy = false;   // fixed mode: a shutdown SQE is in flight
  std::size_t sent = 0;     // of `sending`, completed
  std::string partial;      // an incomplete request head carried over from the last receive
  std::string sending;      // the bytes of the send in flight (stable until it completes)
  std::string queued;       // replies made while a send was in flight
};

io_uring ring;
int listener = -1;
bool direct_send = false;
bool timed_wait = false;
bool fixed_files = false;
io_uring_buf_ring* buf_ring = nullptr;
std::unique_ptr<char[]> buffer_memory;

char* buffer(unsigned id) {
  return buffer_memory.get() + std::size_t{id} * kBufferSize;
}

std::uint64_t tag(Conn* c, Op op) {
  return reinterpret_cast<std::uintptr_t>(c) | op;
}

io_uring_sqe* get_sqe() {
  for (;;) {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring)) return sqe;
    // SQ full: hand it to the kernel and take a fresh slot.
    if (const int e = io_uring_submit(&ring); e < 0 && e != -EINTR && e != -EAGAIN && e != -EBUSY)
      die("io_uring_submit", -e);
  }
}

void arm_accept() {
  io_uring_sqe* sqe = get_sqe();
  if (fixed_files) {
    io_uring_prep_multishot_accept_direct(sqe, listener, nullptr, nullptr, 0);
  } else {
    io_uring_prep_multishot_accept(sqe, listener, nullptr, nullptr, SOCK_CLOEXEC);
  }
  io_uring_sqe_set_data64(sqe, kAccept);
}

void arm_recv(Conn* c) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_recv_multishot(sqe, c->fd, nullptr, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT | (fixed_files ? IOSQE_FIXED_FILE : 0);
  sqe->buf_group = 0;
  io_uring_sqe_set_data64(sqe, tag(c, kRecv));
  c->recv_armed = true;
}

void submit_send(Conn* c) {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_send(sqe, c->fd, c->sending.data() + c->sent, c->sending.size() - c->sent,
                     MSG_NOSIGNAL);
  if (fixed_files) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, tag(c, kSend));
  c->send_busy = true;
}

void give_back(unsigned id) {
  io_uring_buf_ring_add(buf_ring, buffer(id), kBufferSize, static_cast<unsigned short>(id),
                        io_uring_buf_ring_mask(kBufferCount), 0);
  io_uring_buf_ring_advance(buf_ring, 1);
}

// shutdown(2), or its SQE on a registered descriptor; ENOTCONN if the peer went first: no matter.
void shut_down(Conn* c) {
  if (!fixed_files) {
    ::shutdown(c->fd, SHUT_RDWR);
    return;
  }
  if (c->shut_busy) return;
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_shutdown(sqe, c->fd, SHUT_RDWR);
  sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, tag(c, kShut));
  c->shut_busy = true;
}

// Frees the connection once the kernel holds nothing of it (the file's invariant).
void maybe_free(Conn* c) {
  if (!c->closing || c->recv_armed || c->send_busy || c->shut_busy) return;
  // Nothing is in flight on it: a plain close, its result of no use.
  if (fixed_files) {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_close_direct(sqe, static_cast<unsigned>(c->fd));
    io_uring_sqe_set_data64(sqe, kDone);
  } else {
    ::close(c->fd);
  }
  delete c;
}

// Stops reading and answering. A receive still armed is ended by shutdown(2) (its last CQE,
// EOF, then frees the connection), so a peer that never closes cannot pin it.
void stop(Conn* c) {
  if (c->closing) return;
  c->closing = true;
  if (c->recv_armed) shut_down(c);
}

void start_closing(Conn* c) {
  stop(c);
  maybe_free(c);
}

// Sends `queued` if no send is in flight: through the ring, or (direct) with send(2) first.
// Never frees the connection (its callers still use it; they end with maybe_free).
void flush(Conn* c) {
  if (c->send_busy || c->queued.empty()) return;
  c->sending.swap(c->queued);
  c->queued.clear();
  c->sent = 0;
  if (direct_send) {
    const ssize_t n =
        ::send(c->fd, c->sending.data(), c->sending.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) return stop(c);
    if (n > 0) c->sent = static_cast<std::size_t>(n);
    if (c->sent == c->sending.size()) {
      c->sending.clear();
      if (c->shut) shut_down(c);
      return;
    }
  }
  submit_send(c);
}

void respond(std::string& out, std::string_view path) {
  std::string_view type = "text/plain", body = "Hello, World!", status = "200 OK";
  // Reused: no allocation per request once warm.
  static rapidjson::StringBuffer json;
  static rapidjson::Writer<rapidjson::StringBuffer> writer;
  if (path == "/json") {
    json.Clear();
    writer.Reset(json);
    writer.StartObject();
    writer.Key("message");
    writer.String("Hello, World!");
    writer.EndObject();
    type = "application/json";
    body = {json.GetString(), json.GetSize()};
  } else if (path != "/plaintext") {
    status = "404 Not Found";
    body = "Not Found";
  }
  char length[24];
  const int len = std::snprintf(length, sizeof length, "%zu", body.size());
  for (std::string_view part :
       {std::string_view("HTTP/1.1 "), status, std::string_view("\r\nServer: uring\r\nDate: "),
        date(), std::string_view("\r\nContent-Type: "), type,
        std::string_view("\r\nContent-Length: "),
        std::string_view(length, static_cast<std::size_t>(len)), std::string_view("\r\n\r\n"),
        body})
    out.append(part);
}

constexpr std::string_view kBadRequest =
    "HTTP/1.1 400 Bad Request\r\nServer: uring\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

// Answers every complete request in `data` into c->queued; returns how many bytes it consumed,
// or npos at a malformed request line (the replies before it stay queued).
std::size_t answer(Conn* c, std::string_view data) {
  const std::size_t size = data.size();
  std::size_t end;
  while ((end = data.find("\r\n\r\n")) != std::string_view::npos) {
    const std::string_view line = data.substr(0, data.find("\r\n"));
    const std::size_t sp = line.find(' ');
    const std::size_t sp2 = sp == std::string_view::npos ? sp : line.find(' ', sp + 1);
    if (sp2 == std::string_view::npos) return std::string_view::npos;
    respond(c->queued, line.substr(sp + 1, sp2 - sp - 1));
    data.remove_prefix(end + 4);
  }
  return size - data.size();
}

void bad_request(Conn* c) {
  // A malformed request line or a head over kMaxHead: the 400 goes out after the replies before
  // it, then shutdown(2) ends the receive with EOF and the connection closes.
  c->shut = true;
  c->partial.clear();
  c->queued.append(kBadRequest);
  flush(c);
  if (!c->send_busy) shut_down(c);
}

void on_recv(Conn* c, const io_uring_cqe* cqe) {
  const bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;
  if (!more) c->recv_armed = false;
  if (cqe->res == -ENOBUFS) {  // every buffer was taken: they are back before the next submit
    // Re-armed also after a 400 (what it takes is dropped): only its EOF ends the connection.
    if (!c->closing) arm_recv(c);
    return maybe_free(c);
  }
  if (cqe->res <= 0) return start_closing(c);  // EOF, reset or any other error
  if (!(cqe->flags & IORING_CQE_F_BUFFER)) die("receive without a buffer", EINVAL);
  const unsigned id = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
  const std::string_view in(buffer(id), static_cast<std::size_t>(cqe->res));
  if (c->closing || c->shut) {  // a 400 is on its way: what comes after it is dropped
    give_back(id);
  } else if (c->partial.empty()) {
    // The usual case: whole requests, parsed in the provided buffer without a copy.
    const std::size_t used = answer(c, in);
    if (used != std::string_view::npos) c->partial.assign(in.substr(used));
    give_back(id);
    if (used == std::string_view::npos || c->partial.size() >= kMaxHead) bad_request(c);
  } else {
    c->partial.append(in);
    give_back(id);
    const std::size_t used = answer(c, c->partial);
    if (used == std::string_view::npos) {
      bad_request(c);
    } else {
      c->partial.erase(0, used);
      if (c->partial.size() >= kMaxHead) bad_request(c);
    }
  }
  if (!c->shut) flush(c);
  if (!more && !c->closing) arm_recv(c);  // after a 400 too: only its EOF ends the connection
  maybe_free(c);
}

void on_send(Conn* c, const io_uring_cqe* cqe) {
  c->send_busy = false;
  // The peer is gone (EPIPE, ECONNRESET), or a stream send that took nothing.
  if (cqe->res < 0 || (cqe->res == 0 && c->sent < c->sending.size())) return start_closing(c);
  c->sent += static_cast<std::size_t>(cqe->res);
  if (c->sent < c->sending.size() && !c->closing) return submit_send(c);  // a short send
  c->sending.clear();
  if (c->closing) {
    // Nothing to shut down: stop() did, or the receive has ended.
  } else if (c->shut) {
    shut_down(c);
  } else {
    flush(c);
  }
  maybe_free(c);
}

void on_accept(const io_uring_cqe* cqe) {
  if (!(cqe->flags & IORING_CQE_F_MORE)) arm_accept();
  if (cqe->res < 0) {  // EMFILE and the like: this connection is lost, the next may do
    std::fprintf(stderr, "uring_http: accept: %s\n", std::strerror(-cqe->res));
    return;
  }
  auto* c = new Conn;
  c->fd = cqe->res;
  const int one = 1;
  // As the Asio baseline: replies leave at once (fixed mode: inherited from the listener).
  if (!fixed_files && ::setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    std::perror("uring_http: TCP_NODELAY");
  c->sending.reserve(kBufferSize);
  c->queued.reserve(kBufferSize);
  arm_recv(c);
}

void setup_ring(const char* mode) {
  io_uring_params params{};
  params.flags = IORING_SETUP_CQSIZE;
  params.cq_entries = kCqEntries;
  const std::string_view m = mode;
  if (m == "defer") {
    params.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  } else if (m == "coop") {
    params.flags |= IORING_SETUP_COOP_TASKRUN;
  } else if (m != "basic") {
    std::fprintf(stderr, "uring_http: mode %s: defer, coop or basic\n", mode);
    std::exit(2);
  }
  int e = io_uring_queue_init_params(kEntries, &ring, &params);
  if (e == -EINVAL && m != "basic") {
    std::fprintf(stderr, "uring_http: %s refused (%s), using a basic ring\n", mode,
                 std::strerror(-e));
    params = {};
    params.flags = IORING_SETUP_CQSIZE;
    params.cq_entries = kCqEntries;
    e = io_uring_queue_init_params(kEntries, &ring, &params);
  }
  if (e < 0) die("io_uring_queue_init_params", -e);

  const std::size_t bytes = kBufferCount * sizeof(io_uring_buf);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (p == MAP_FAILED) die("mmap", errno);
  buf_ring = static_cast<io_uring_buf_ring*>(p);
  io_uring_buf_ring_init(buf_ring);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<std::uint64_t>(buf_ring);
  reg.ring_entries = kBufferCount;
  reg.bgid = 0;
  if (e = io_uring_register_buf_ring(&ring, &reg, 0); e < 0) die("io_uring_register_buf_ring", -e);
  if (fixed_files) {
    if (e = io_uring_register_files_sparse(&ring, kMaxFixed); e < 0)
      die("io_uring_register_files_sparse", -e);
  }
  buffer_memory = std::make_unique<char[]>(std::size_t{kBufferCount} * kBufferSize);
  for (unsigned id = 0; id < kBufferCount; ++id)
    io_uring_buf_ring_add(buf_ring, buffer(id), kBufferSize, static_cast<unsigned short>(id),
                          io_uring_buf_ring_mask(kBufferCount), static_cast<int>(id));
  io_uring_buf_ring_advance(buf_ring, kBufferCount);
}

}  // namespace

int main(int argc, char** argv) {
  const auto port = static_cast<std::uint16_t>(argc > 1 ? std::atoi(argv[1]) : 0);
  const char* mode = argc > 2 ? argv[2] : "defer";
  if (argc > 3) {
    const std::string_view send_mode = argv[3];
    if (send_mode != "sqe" && send_mode != "direct") {
      std::fprintf(stderr, "uring_http: send mode %s: sqe or direct\n", argv[3]);
      return 2;
    }
    direct_send = send_mode == "direct";
  }
  if (argc > 4) {
    const std::string_view wait_mode = argv[4];
    if (wait_mode != "wait" && wait_mode != "timeout") {
      std::fprintf(stderr, "uring_http: wait mode %s: wait or timeout\n", argv[4]);
      return 2;
    }
    timed_wait = wait_mode == "timeout";
  }
  if (argc > 5) {
    const std::string_view file_mode = argv[5];
    if (file_mode != "plain" && file_mode != "fixed") {
      std::fprintf(stderr, "uring_http: file mode %s: plain or fixed\n", argv[5]);
      return 2;
    }
    fixed_files = file_mode == "fixed";
    if (fixed_files && direct_send) {
      std::fprintf(stderr,
                   "uring_http: fixed descriptors need sqe sends (send(2) takes a descriptor)\n");
      return 2;
    }
  }
  std::signal(SIGPIPE, SIG_IGN);  // direct sends carry MSG_NOSIGNAL too; belt and braces

  listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) die("socket", errno);
  const int one = 1;
  if (::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
    die("SO_REUSEADDR", errno);
  if (fixed_files && ::setsockopt(listener, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    die("TCP_NODELAY", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("bind", errno);
  if (::listen(listener, 4096) != 0) die("listen", errno);
  socklen_t len = sizeof addr;
  if (::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    die("getsockname", errno);

  setup_ring(mode);
  arm_accept();
  std::printf("ready %u\n", ntohs(addr.sin_port));
  std::fflush(stdout);

  for (;;) {
    // One enter: the last batch's sends and re-arms go in, and it waits for the next CQE.
    int e;
    if (timed_wait) {
      __kernel_timespec ts{.tv_sec = 1, .tv_nsec = 0};
      io_uring_cqe* first = nullptr;
      e = io_uring_submit_and_wait_timeout(&ring, &first, 1, &ts, nullptr);
      if (e == -ETIME) e = 0;  // an idle second: nothing to reap
    } else {
      e = io_uring_submit_and_wait(&ring, 1);
    }
    // EINTR: SIGUSR1 (count_alloc's report); EBUSY/EAGAIN: the CQ is full or memory is short,
    // reaping below makes room.
    if (e < 0 && e != -EINTR && e != -EBUSY && e != -EAGAIN) die("io_uring_submit_and_wait", -e);
    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      const std::uint64_t data = io_uring_cqe_get_data64(cqe);
      auto* c = reinterpret_cast<Conn*>(static_cast<std::uintptr_t>(data & ~std::uint64_t{7}));
      switch (static_cast<Op>(data & 7)) {
        case kAccept:
          on_accept(cqe);
          break;
        case kRecv:
          on_recv(c, cqe);
          break;
        case kSend:
          on_send(c, cqe);
          break;
        case kShut:
          c->shut_busy = false;
          maybe_free(c);
          break;
        case kDone:
          break;
        default:
          die("unknown completion", EINVAL);
      }
    }
    io_uring_cq_advance(&ring, seen);
  }
}
