// IocpEngine's core: set-up, attach, starting, cancelling and closing operations, the wait on
// the completion port and the completion handler. The invariants are in iocp_engine.hpp.
#include "windows/iocp_engine.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <limits>

#include "arbor/internal/log.hpp"
#include "arbor/io/submit_batch.hpp"
#include "common/engine_table.hpp"
#include "windows/winsock.hpp"

namespace arbor::io {
namespace iocp {
namespace {

SOCKET socket_of(Handle h) noexcept {
  return static_cast<SOCKET>(h);
}

// Wait timeouts are whole milliseconds: rounded up, so a timer's wait never ends before its
// deadline (an early return would only spin once more); 0 stays a poll, -1 is forever.
DWORD to_milliseconds(std::int64_t timeout_ns) noexcept {
  if (timeout_ns < 0) return INFINITE;
  const std::int64_t ms = (timeout_ns + 999'999) / 1'000'000;
  return static_cast<DWORD>(std::min<std::int64_t>(ms, INFINITE - 1));
}

// Asks Windows to cancel one overlapped call (or, with nullptr, every call on the socket).
// ERROR_NOT_FOUND means it has completed already: its packet is on its way.
void cancel_io(Handle fd, OVERLAPPED* overlapped) noexcept {
  if (::CancelIoEx(reinterpret_cast<HANDLE>(fd), overlapped)) return;
  const DWORD error = ::GetLastError();
  if (error != ERROR_NOT_FOUND) log::warn("iocp: CancelIoEx failed ({})", error);
}

// A receive on a socket whose read side is shut down fails on Windows (WSAESHUTDOWN at once,
// STATUS_PIPE_DISCONNECTED in a packet; both EPIPE here), and a graceful disconnect reports
// ERROR_GRACEFUL_DISCONNECT (EPIPE too); POSIX reports end of stream for both.
std::int64_t as_receive_result(const Operation& op, std::int64_t result) noexcept {
  const bool receive =
      op.kind == OpKind::receive || op.kind == OpKind::receive_from || op.kind == OpKind::readable;
  return receive && result == -EPIPE ? 0 : result;
}

// Transfers that may be issued again when something outside the engine cancelled them: nothing
// has moved (the packet reported no bytes), and the owner still waits for its result.
bool reissuable(OpKind kind) noexcept {
  return kind != OpKind::accept && kind != OpKind::connect;
}

}  // namespace

std::error_code IocpEngine::init() {
  if (auto failed = load_extensions(ext_)) {
    log::error("iocp engine: Winsock extensions unavailable: {}", failed.message());
    return failed;
  }
  const std::size_t k = options().max_batch;
  for (Port& p : ports_) {
    p.port = ::CreateIoCompletionPort(INVALID_HANDLE_VALUE, nullptr, 0, 0);
    if (p.port == nullptr) return {static_cast<int>(::GetLastError()), std::system_category()};
    p.entries.resize(k);
  }
  return start_polling();
}

IocpEngine::~IocpEngine() {
  // Polling has stopped (the owner's deleter, engine.hpp). Sockets still open were never closed
  // by their owners: the engine owns them, so it closes them. Their pending calls (there should
  // be none: cancel first) would complete into a port nobody reads.
  pool_.for_each([this](IocpDescriptor& d) {
    std::lock_guard guard(d.lock);
    if (d.close_if_open()) descriptors_.fetch_sub(1, std::memory_order_relaxed);
  });
  for (Port& p : ports_)
    if (p.port != nullptr && !::CloseHandle(p.port))
      log::warn("iocp: closing a completion port failed ({})", ::GetLastError());
}

Result<DescriptorRef> IocpEngine::attach(Handle handle) noexcept {
  const SOCKET s = socket_of(handle);
  WSAPROTOCOL_INFOW info{};
  int info_size = sizeof info;
  if (::getsockopt(s, SOL_SOCKET, SO_PROTOCOL_INFOW, reinterpret_cast<char*>(&info), &info_size) !=
      0) {
    const auto error = windows::last_socket_error();
    close_handle(handle);
    return error;
  }
  u_long non_blocking = 1;
  if (::ioctlsocket(s, FIONBIO, &non_blocking) != 0) {
    const auto error = windows::last_socket_error();
    close_handle(handle);
    return error;
  }
  auto adopted = pool_.adopt(handle, ports_.size());
  if (!adopted) return adopted;
  auto& d = descriptor_cast<IocpDescriptor>(*adopted->descriptor);
  // The descriptor is the completion key: published to the poller by the association itself
  // (a system call both threads make; Windows orders them).
  const HANDLE port = ports_[static_cast<std::size_t>(d.poller)].port;
  std::error_code failed;
  if (::CreateIoCompletionPort(reinterpret_cast<HANDLE>(s), port, reinterpret_cast<ULONG_PTR>(&d),
                               0) == nullptr)
    failed = {static_cast<int>(::GetLastError()), std::system_category()};
  // Only for a socket whose provider hands out real kernel handles (IFS): a layered provider
  // that is not IFS may complete a call at once and post its packet anyway (libuv checks the
  // same flag).
  const bool ifs = (info.dwServiceFlags1 & XP1_IFS_HANDLES) != 0;
  const bool skip = !failed && ifs &&
                    ::SetFileCompletionNotificationModes(
                        reinterpret_cast<HANDLE>(s), FILE_SKIP_COMPLETION_PORT_ON_SUCCESS |
                                                         FILE_SKIP_SET_EVENT_ON_HANDLE) != FALSE;
  if (!failed && !skip && skip_on_success_.exchange(false, std::memory_order_relaxed))
    log::info(
        "iocp: a socket {} FILE_SKIP_COMPLETION_PORT_ON_SUCCESS ({}); its immediate "
        "completions go through the port",
        ifs ? "refused" : "has a non-IFS provider, so no", ifs ? ::GetLastError() : 0);
  if (!failed && info.iSocketType == SOCK_DGRAM) {
    // A datagram socket whose earlier send met an ICMP port-unreachable would otherwise fail
    // its next receive with WSAECONNRESET, which POSIX sockets never do for an unconnected one.
    BOOL report = FALSE;
    DWORD unused = 0;
    if (::WSAIoctl(s, SIO_UDP_CONNRESET, &report, sizeof report, nullptr, 0, &unused, nullptr,
                   nullptr) != 0)
      log::debug("iocp: SIO_UDP_CONNRESET refused ({})", ::WSAGetLastError());
  }
  if (failed) {
    close_handle(handle);
    {
      std::lock_guard guard(d.lock);
      d.closed = d.fd_closed = true;  // never named: nothing may close this handle again
    }
    pool_.release(&d);
    return failed;
  }
  {
    std::lock_guard guard(d.lock);
    d.family = info.iAddressFamily;
    d.stream = info.iSocketType == SOCK_STREAM;
    d.skip_on_success = skip;
  }
  descriptors_.fetch_add(1, std::memory_order_relaxed);
  return adopted;
}

bool IocpEngine::start(Operation& op) noexcept {
  auto& d = descriptor_of<IocpDescriptor>(op);
  const int side = Descriptor::side(op.kind);
  {
    std::lock_guard guard(d.lock);
    // Admitted first: an operation refused as busy may be the one pending, whose OVERLAPPED
    // the kernel still owns.
    if (!admit(d, op, cancelling())) return true;
    prepare(d, op, side);
  }
  return issue_prepared(d, op, side);
}

std::int64_t IocpEngine::receive_now(Operation& op) noexcept {
  auto& d = descriptor_of<IocpDescriptor>(op);
  {
    std::lock_guard guard(d.lock);
    if (!admit(d, op, cancelling())) return op.result;
    ++d.busy;  // keeps the socket open while the call runs outside the lock
  }
  // A plain receive on the non-blocking socket (attach() set FIONBIO): with no overlapped
  // receive pending (admit() saw the read side free), no bytes can be held anywhere else.
  const int n = ::recv(socket_of(d.fd), static_cast<char*>(op.data),
                       static_cast<int>(std::min<std::size_t>(op.size, INT_MAX)), 0);
  std::int64_t r = n;
  if (n == SOCKET_ERROR) {
    const DWORD error = static_cast<DWORD>(::WSAGetLastError());
    r = error == WSAEWOULDBLOCK ? -EAGAIN : as_receive_result(op, negative_errno(error));
  }
  Descriptor::Finish close_now;
  {
    std::lock_guard guard(d.lock);
    --d.busy;
    close_now = d.finish_if_closed();
  }
  finish_close(d, close_now);
  return r;
}

void IocpEngine::prepare(IocpDescriptor& d, Operation& op, int side) noexcept {
  IocpOp& state = emplace_state<IocpOp>(op);
  state.overlapped = {};
  state.op = &op;
  state.dequeued.store(false, std::memory_order_relaxed);
  state.accepted = INVALID_SOCKET;
  d.slot[side] = &op;
  ++d.busy;  // keeps the socket open while the call runs outside the lock
}

bool IocpEngine::issue_prepared(IocpDescriptor& d, Operation& op, int side) noexcept {
  const Issued issued = issue(op, d, *ext_);
  bool finished = issued.outcome != Issued::Outcome::pending;
  Descriptor::Finish close_now;
  {
    std::lock_guard guard(d.lock);
    --d.busy;
    if (finished) {
      d.slot[side] = nullptr;
      op.result = issued.outcome == Issued::Outcome::failed ? as_receive_result(op, issued.result)
                                                            : settle(d, op, issued.result);
    } else if (d.slot[side] == &op &&
               (d.closed || cancelling() || op.cancel_requested.load(std::memory_order_relaxed))) {
      // A cancel or close that came while the call was being issued found nothing to cancel
      // yet. Only while op still holds its slot: once its completion has run, its memory may
      // be the next operation's.
      cancel_io(d.fd, &state_of<IocpOp>(op).overlapped);
    }
    close_now = d.finish_if_closed();
  }
  finish_close(d, close_now);
  if (finished) inline_finishes_.fetch_add(1, std::memory_order_relaxed);
  return finished;
}

std::int64_t IocpEngine::settle(IocpDescriptor& d, Operation& op, std::int64_t raw) const noexcept {
  if (raw < 0) {
    abandon(op);
    return as_receive_result(op, raw);
  }
  if (d.closed) {  // closed while in flight: cancelled, whatever the kernel managed
    abandon(op);
    return -ECANCELED;
  }
  return finish(op, d, *ext_, raw);
}

void IocpEngine::cancel(Operation& op) noexcept {
  auto& d = descriptor_of<IocpDescriptor>(op);
  const int side = Descriptor::side(op.kind);
  std::lock_guard guard(d.lock);
  op.cancel_requested.store(true, std::memory_order_relaxed);
  // Not pending (finished, never started, or its socket closed and the close cancels it):
  // nothing to do. A call still being issued (busy) is cancelled by start() after it.
  if (d.closed || d.generation != op.generation || d.slot[side] != &op) return;
  cancel_io(d.fd, &state_of<IocpOp>(op).overlapped);
}

void IocpEngine::close(DescriptorRef socket) noexcept {
  auto& d = descriptor_cast<IocpDescriptor>(*socket.descriptor);
  Descriptor::Finish close_now;
  {
    std::lock_guard guard(d.lock);
    if (d.closed || d.generation != socket.generation) return;
    d.closed = true;
    // closesocket cancels the socket's calls too; asking first makes it explicit, and the
    // socket is still open (busy or not). A call still being issued is cancelled by its
    // issuer, which sees `closed` after the call.
    if (!d.slots_empty()) cancel_io(d.fd, nullptr);
    close_now = d.finish_if_closed();
  }
  finish_close(d, close_now);
}

void IocpEngine::finish_close(IocpDescriptor& d, const Descriptor::Finish& finish) noexcept {
  if (finish.close_fd != kInvalidHandle) {
    if (::closesocket(socket_of(finish.close_fd)) != 0)
      log::warn("iocp: closesocket failed ({})", ::WSAGetLastError());
    descriptors_.fetch_sub(1, std::memory_order_relaxed);
  }
  // Slots empty: no packet names this descriptor any more.
  if (finish.release) pool_.release(&d);
}

void IocpEngine::cancel_parked() noexcept {
  pool_.for_each([](IocpDescriptor& d) {
    std::lock_guard guard(d.lock);
    if (d.closed) return;  // its close cancelled its calls
    for (Operation* op : d.slot) {
      if (op == nullptr) continue;
      op->cancel_requested.store(true, std::memory_order_relaxed);
      // A call still being issued is not found here; its issuer sees cancelling() after it.
      cancel_io(d.fd, &state_of<IocpOp>(*op).overlapped);
    }
  });
}

// cancel_all() asks Windows to cancel every call, but a cancelled call's packet may reach the
// port after CancelIoEx returns (under wine it does whenever a thread other than the issuer
// cancels), and once polling stops nobody would dequeue it: the operation would never complete.
// So a stop after cancel_all() reaps this port until every operation on it has had its packet.
void IocpEngine::on_poller_stop(int poller) noexcept {
  if (!cancelling()) return;  // pending operations stay pending (Engine::stop)
  // Bounded in case a cancel is lost: reported, not waited for forever.
  constexpr std::int64_t kPatienceNs = 10'000'000'000;
  // Real time, not now_ns(): a test's paused clock must not make this wait forever.
  const auto steady = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const std::int64_t give_up = steady() + kPatienceNs;
  std::vector<sched::Event> events;
  try {
    events.resize(options().max_batch);
  } catch (const std::bad_alloc&) {
    log::error("iocp: out of memory stopping; cancelled operations may never complete");
    return;
  }
  for (;;) {
    const std::size_t left = awaiting_packets(poller);
    if (left == 0) return;
    const std::int64_t now = steady();
    if (now >= give_up) {
      log::error("iocp: {} cancelled operation(s) had no completion {} s after stop", left,
                 kPatienceNs / 1'000'000'000);
      return;
    }
    deliver({events.data(), wait(poller, give_up - now, events)});
  }
}

std::size_t IocpEngine::awaiting_packets(int poller) noexcept {
  std::size_t n = 0;
  pool_.for_each([&](IocpDescriptor& d) {
    std::lock_guard guard(d.lock);
    if (d.poller != poller) return;
    for (Operation* op : d.slot)
      if (op != nullptr && !state_of<IocpOp>(*op).dequeued.load(std::memory_order_relaxed)) ++n;
  });
  return n;
}

std::size_t IocpEngine::wait(int poller, std::int64_t timeout_ns,
                             std::span<sched::Event> out) noexcept {
  Port& p = ports_[static_cast<std::size_t>(poller)];
  const ULONG room = static_cast<ULONG>(std::min(out.size(), p.entries.size()));
  ULONG n = 0;
  if (!::GetQueuedCompletionStatusEx(p.port, p.entries.data(), room, &n,
                                     to_milliseconds(timeout_ns), FALSE)) {
    const DWORD error = ::GetLastError();
    if (error != WAIT_TIMEOUT) log::error("iocp: GetQueuedCompletionStatusEx failed ({})", error);
    return 0;
  }
  std::size_t count = 0;
  for (ULONG i = 0; i < n; ++i) {
    const OVERLAPPED_ENTRY& entry = p.entries[i];
    if (entry.lpOverlapped == nullptr) {  // a wake: later wakes must post again
      p.wake_posted.exchange(false, std::memory_order_acq_rel);
      continue;
    }
    IocpOp& state = state_of_overlapped(entry.lpOverlapped);
    state.dequeued.store(true, std::memory_order_relaxed);
    out[count++] = {&complete, state.op,
                    completion_result(*entry.lpOverlapped, entry.dwNumberOfBytesTransferred),
                    reinterpret_cast<std::uintptr_t>(this)};
  }
  packets_.fetch_add(count, std::memory_order_relaxed);
  return count;
}

void IocpEngine::wake(int poller) noexcept {
  Port& p = ports_[static_cast<std::size_t>(poller)];
  if (p.wake_posted.exchange(true, std::memory_order_acq_rel)) return;  // one is queued
  wakes_.fetch_add(1, std::memory_order_relaxed);
  if (!::PostQueuedCompletionStatus(p.port, 0, 0, nullptr)) {
    log::error("iocp: PostQueuedCompletionStatus failed ({})", ::GetLastError());
    p.wake_posted.store(false, std::memory_order_release);
  }
}

void IocpEngine::complete(const sched::Event& event, sched::Disposition) noexcept {
  auto* op = static_cast<Operation*>(event.target);
  auto* self = reinterpret_cast<IocpEngine*>(static_cast<std::uintptr_t>(event.data));
  auto& d = descriptor_of<IocpDescriptor>(*op);
  const int side = Descriptor::side(op->kind);
  std::int64_t result = 0;
  bool release = false;
  bool again = false;
  {
    // The socket is open unless closed (fd_closed implies closed), so finish() may use it.
    std::lock_guard guard(d.lock);
    // Cancelled, but not by the engine (no cancel(), close() or cancel_all() asked): by
    // io::shutdown(), which cancels the socket's calls because Windows leaves a receive pending
    // across shutdown(SD_RECEIVE), where POSIX ends it. Issued again, the call meets the shut
    // side at once (end of stream, or EPIPE for a send), or waits on as before if that side is
    // still open. The operation keeps its slot, so nothing else takes the side meanwhile.
    again = event.result == -ECANCELED && reissuable(op->kind) && !d.closed &&
            !self->cancelling() && !op->cancel_requested.load(std::memory_order_relaxed);
    if (again) {
      self->prepare(d, *op, side);
    } else {
      result = self->settle(d, *op, event.result);
      d.slot[side] = nullptr;  // free first: the owner may start the next
      release = d.closed && d.fd_closed && d.slots_empty();
    }
  }
  if (again) {
    self->reissues_.fetch_add(1, std::memory_order_relaxed);
    if (!self->issue_prepared(d, *op, side)) return;  // pending again: its packet completes it
    result = op->result;
  }
  if (release) self->pool_.release(&d);
  SubmitBatch batch;
  op->complete(*op, result);
}

void IocpEngine::backend_counters(EngineCounters& c) const noexcept {
  c.add("inline_finishes", "Operations finished inside start() (no completion packet).",
        inline_finishes_.load(std::memory_order_relaxed));
  c.add("packets", "Completion packets dequeued for operations.",
        packets_.load(std::memory_order_relaxed));
  c.add("reissues", "Calls issued again after io::shutdown() cancelled them.",
        reissues_.load(std::memory_order_relaxed));
}

namespace {

Result<std::unique_ptr<Engine>> create(sched::Scheduler& scheduler, const EngineOptions& options,
                                       bool announce) {
  auto engine = std::make_unique<IocpEngine>(scheduler, options);
  if (auto ec = engine->init()) return ec;
  if (announce)
    log::info("engine: iocp, {}, batch {}, tree {}{}", describe_polling(options), options.max_batch,
              options.max_tree, options.inline_completions ? ", inline" : "");
  return std::unique_ptr<Engine>(std::move(engine));
}

// A completion port and the Winsock extensions: all the engine needs from the system.
std::error_code probe() noexcept {
  const Extensions* ext = nullptr;
  if (auto failed = load_extensions(ext)) return failed;
  HANDLE port = ::CreateIoCompletionPort(INVALID_HANDLE_VALUE, nullptr, 0, 0);
  if (port == nullptr) return {static_cast<int>(::GetLastError()), std::system_category()};
  ::CloseHandle(port);
  return {};
}

}  // namespace
}  // namespace iocp

// Pollers for now: a dedicated thread in GetQueuedCompletionStatusEx. Workers mode fits IOCP
// (any thread may dequeue; iocp_engine.hpp) and is the next step once measured.
const EngineEntry kIocpEngine{"iocp", IoMode::pollers, &iocp::probe, &iocp::create};

}  // namespace arbor::io
