// SignalListener on POSIX: a signal handler that writes to each listener's own socket pair.
//
// Why this shape. signalfd (and sigwait) need the signal blocked in every thread, which a
// library cannot promise (threads started before it, other libraries'). So, as Tokio and libuv
// do, a handler is installed, and it does only what a handler may: atomics and send(2). Each
// listener owns a socket pair; its read end is attached to the runtime's engine, so recv() is
// an ordinary one-byte receive on any engine (io_uring's receive needs a socket, not a pipe),
// cancelled like any other, in as many runtimes as the process has, with no thread, no driver
// task and no global descriptor. The byte written is the signal's number.
//
// The registry the handler reads: a lock-free list of Slots (one per listener and signal),
// pushed at the head under `registry_mutex` and never freed (a freed slot is reused), so the
// handler can walk it at any moment. A slot names its listener's write end in `fd` (-1: free)
// and has a `pending` flag: the handler sends a byte only when it sets the flag, and recv()
// clears it after reading the byte, so a listener's socket holds at most one byte per signal
// (it never fills up and drops another signal's byte) and a delivery that comes before recv()
// has returned the previous one coalesces into it.
//
// Closing a write end the handler may be sending on (or, worse, whose number has been reused)
// is the hazard. The handler counts itself in `in_handler` before it reads any `fd`; a release
// stores -1 into the slot's `fd` and then waits until `in_handler` is zero before it closes.
// Both sides use seq_cst, so one of them sees the other: either the handler reads -1, or the
// release sees the handler counted and waits for it (it never blocks: send is MSG_DONTWAIT).
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <utility>
#include <vector>

#include "arbor/io/socket.hpp"
#include "arbor/runtime/attached_socket.hpp"
#include "arbor/runtime/io_awaiter.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/signal.hpp"

namespace arbor {
namespace {

#if defined(MSG_NOSIGNAL)
constexpr int kSendFlags = MSG_DONTWAIT | MSG_NOSIGNAL;
#else
constexpr int kSendFlags = MSG_DONTWAIT;  // the read end outlives every send anyway
#endif

struct Slot {
  std::atomic<int> fd{-1};  // the listener's write end; -1 while free
  std::atomic<int> signum{0};
  std::atomic<bool> pending{false};  // a byte for signum is in the socket, not yet returned
  Slot* next = nullptr;              // written once, before the slot is published
};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the handler may only use lock-free atomics");

constinit std::atomic<Slot*> slots{nullptr};
constinit std::atomic<int> in_handler{0};

// Guards slot claims and releases, the counts and the saved dispositions (never the handler).
constinit std::mutex registry_mutex;
int listeners[NSIG];              // listeners per signal
struct sigaction replaced[NSIG];  // the disposition the handler replaced, put back after

extern "C" void on_signal(int signum) {
  const int saved_errno = errno;
  in_handler.fetch_add(1, std::memory_order_seq_cst);
  for (Slot* s = slots.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    // fd first: a claim writes signum before publishing fd (seq_cst includes release).
    const int fd = s->fd.load(std::memory_order_seq_cst);
    if (fd < 0 || s->signum.load(std::memory_order_relaxed) != signum) continue;
    if (s->pending.exchange(true, std::memory_order_acq_rel)) continue;  // coalesces
    const auto byte = static_cast<unsigned char>(signum);
    // A send that failed (ENOBUFS, ENOMEM) leaves no byte for recv() to clear the flag with:
    // clear it here, or this listener would never hear this signal again.
    if (::send(fd, &byte, 1, kSendFlags) < 0) s->pending.store(false, std::memory_order_release);
  }
  in_handler.fetch_sub(1, std::memory_order_release);
  errno = saved_errno;
}

bool forbidden(int signum) {
  if (signum <= 0 || signum >= NSIG || signum > 255) return true;  // the byte carries it
  for (int s : {SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGILL, SIGFPE})
    if (s == signum) return true;
  return false;
}

// Under registry_mutex. The handler may see the slot from the moment `fd` is stored.
Slot* claim(int signum, int fd) {
  Slot* s = slots.load(std::memory_order_relaxed);
  while (s != nullptr && s->fd.load(std::memory_order_relaxed) >= 0)
    s = s->next;
  if (s == nullptr) {
    s = new Slot;  // never freed: the handler may walk past it at any time
    s->next = slots.load(std::memory_order_relaxed);
    slots.store(s, std::memory_order_release);
  }
  s->signum.store(signum, std::memory_order_relaxed);
  s->pending.store(false, std::memory_order_relaxed);
  s->fd.store(fd, std::memory_order_seq_cst);
  return s;
}

// Under registry_mutex. When it returns no handler is sending on the slot's descriptor.
void release(Slot& s) {
  s.fd.store(-1, std::memory_order_seq_cst);
  while (in_handler.load(std::memory_order_seq_cst) != 0)
    ::sched_yield();  // a handler on another thread, a few instructions from its end
}

// Under registry_mutex: the handler for the first listener, the old disposition after the last.
std::error_code add_listener(int signum) {
  if (listeners[signum]++ > 0) return {};
  struct sigaction action {};
  action.sa_handler = &on_signal;
  action.sa_flags = SA_RESTART;  // other code's blocking calls go on after the handler
  sigemptyset(&action.sa_mask);
  if (::sigaction(signum, &action, &replaced[signum]) == 0) return {};
  --listeners[signum];
  return errno_code(errno);
}

void remove_listener(int signum) {
  if (--listeners[signum] == 0) ::sigaction(signum, &replaced[signum], nullptr);
}

}  // namespace

namespace detail {

struct SignalState {
  AttachedSocket socket;  // the read end, attached to the runtime's engine
  int write_fd = -1;
  std::vector<std::pair<int, Slot*>> slots;  // one per signal listened for

  ~SignalState() {
    {
      std::lock_guard lock(registry_mutex);
      for (auto& [signum, slot] : slots) {
        release(*slot);
        remove_listener(signum);
      }
    }
    if (write_fd >= 0) ::close(write_fd);  // no handler can send on it any more
  }                                        // then the engine closes the read end
};

}  // namespace detail

Result<SignalListener> SignalListener::listen(Runtime& runtime, std::span<const int> signals) {
  if (signals.empty()) return std::make_error_code(std::errc::invalid_argument);
  for (int signum : signals)
    if (forbidden(signum)) return std::make_error_code(std::errc::invalid_argument);

  int pair[2];
#if defined(__APPLE__)
  // macOS has no SOCK_CLOEXEC or SOCK_NONBLOCK: io::socket_pair sets both after the call.
  auto made = io::socket_pair(io::SocketType::stream);
  if (!made) return made.error();
  pair[0] = static_cast<int>(made->first);
  pair[1] = static_cast<int>(made->second);
#else
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0)
    return errno_code(errno);
#endif
  auto state = std::make_unique<detail::SignalState>();
  state->write_fd = pair[1];
  auto descriptor = runtime.engine().attach(pair[0]);  // owns pair[0] from here, even on error
  if (!descriptor) return descriptor.error();          // ~SignalState closes pair[1]
  state->socket = detail::AttachedSocket(runtime.engine(), *descriptor);

  std::error_code error;
  {
    std::lock_guard lock(registry_mutex);
    for (int signum : signals) {
      bool seen = false;
      for (auto& entry : state->slots)
        seen = seen || entry.first == signum;
      if (seen) continue;
      if ((error = add_listener(signum))) break;
      state->slots.emplace_back(signum, claim(signum, state->write_fd));
    }
  }
  if (error) return error;  // ~SignalState releases the slots claimed so far
  return SignalListener(std::move(state));
}

Task<Result<int>> SignalListener::recv() {
  detail::SignalState* state = state_.get();
  if (state == nullptr) co_return std::make_error_code(std::errc::bad_file_descriptor);
  unsigned char byte = 0;
  auto n = co_await detail::TransferAwaiter(state->socket.engine(), state->socket.ref(),
                                            io::OpKind::receive, &byte, 1);
  if (!n) co_return n.error();
  if (*n == 0) co_return std::make_error_code(std::errc::broken_pipe);  // we hold the write end
  const int signum = byte;
  // After the read: a delivery between the read and this store coalesces into this one (it
  // came before recv() returned); one after it sends a new byte.
  for (auto& [s, slot] : state->slots)
    if (s == signum) slot->pending.store(false, std::memory_order_release);
  co_return signum;
}

SignalListener::SignalListener(std::unique_ptr<detail::SignalState> state) noexcept
    : state_(std::move(state)) {}
SignalListener::SignalListener() noexcept = default;
SignalListener::SignalListener(SignalListener&&) noexcept = default;
SignalListener& SignalListener::operator=(SignalListener&&) noexcept = default;
SignalListener::~SignalListener() = default;

Result<SignalListener> ctrl_c(Runtime& runtime) {
  return signal(runtime, SIGINT);
}

}  // namespace arbor
