// IocpEngine: the completion backend on Windows (I/O completion ports). This private header
// holds what its two source files share: IOCP's parts of a descriptor and of an operation, the
// Winsock extension functions, and the class. docs/architecture.md ("IocpEngine") maps each
// operation onto the Engine interface; the invariants kept here:
// - Every attached socket is associated with exactly one completion port (its poller's), with
//   its Descriptor as the completion key, and, where Windows allows it, with
//   FILE_SKIP_COMPLETION_PORT_ON_SUCCESS: a call that succeeds at once then posts no packet and
//   the operation finishes inside start().
// - An operation occupies its descriptor's slot from admission until its result is handed to
//   its owner: a slot holds an operation whose call is being issued (`busy` counts that thread)
//   or whose completion packet is still to come. So a descriptor with an occupied slot is never
//   recycled, and a packet that arrives after closesocket still finds the descriptor (and the
//   OVERLAPPED, which lives in the operation) it names.
// - The SOCKET is closed only under `closed` with `busy` == 0 (Descriptor::finish_if_closed),
//   and CancelIoEx is only called under the descriptor lock on a socket not yet closed, so no
//   cancel can reach a handle value Windows has since given to another socket.
// - An operation whose socket was closed before its result was handed over completes with
//   -ECANCELED, whatever the kernel reported (an accepted socket is closed, not leaked), so
//   close() completes every operation in flight exactly once with operation_canceled.
//
// IOCP lets any thread dequeue completions, so unlike io_uring nothing ties a socket's
// completion work to the thread that started it: IoMode::workers (the scheduler's Driver) fits
// this engine without io_uring's task-work interrupts. The default is pollers until that mode
// has been measured here.
#pragma once

// winsock2.h before windows.h (common/sockaddr.hpp says why); mswsock.h for AcceptEx & co.
// The order matters, not the alphabet.
// clang-format off
#include <winsock2.h>
#include <ws2tcpip.h>
#include <mswsock.h>
#include <windows.h>
// clang-format on

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/descriptor.hpp"
#include "common/engine_core.hpp"
#include "common/operation_state.hpp"

namespace arbor::io::iocp {

/// Bytes AcceptEx needs for each of the local and the peer address: the largest address plus
/// the 16 bytes it documents.
constexpr DWORD kAcceptAddressSlot = sizeof(sockaddr_storage) + 16;
/// Buffers one vectored send passes to WSASend; more are sent by the caller's next call (a
/// vectored send may always be partial).
constexpr std::size_t kMaxGather = 64;

// IOCP's part of a socket: what AcceptEx, ConnectEx and receive need to know about it, and
// whether a call that succeeds at once posts a completion packet too.
struct IocpDescriptor : Descriptor {
  int family = AF_INET;
  bool stream = true;
  bool skip_on_success = false;  // FILE_SKIP_COMPLETION_PORT_ON_SUCCESS took
  void reset(Handle handle, int owner) noexcept {
    Descriptor::reset(handle, owner);
    family = AF_INET;
    stream = true;
    skip_on_success = false;
  }
};

// IOCP's part of an operation: the OVERLAPPED the kernel completes (first, so a dequeued
// OVERLAPPED* is the state's address), and what must outlive the call until its completion:
// the receive flags, WSARecvFrom's address length, AcceptEx's socket and address buffer.
// `dequeued`: its packet has left the port (what stopping after cancel_all() waits for).
struct IocpOp {
  OVERLAPPED overlapped;
  Operation* op;
  std::atomic<bool> dequeued;
  DWORD flags;
  INT address_size;
  SOCKET accepted;
  char addresses[2 * kAcceptAddressSlot];
};
static_assert(std::is_standard_layout_v<IocpOp>, "OVERLAPPED* must convert to IocpOp*");

inline IocpOp& state_of_overlapped(OVERLAPPED* overlapped) noexcept {
  return *reinterpret_cast<IocpOp*>(overlapped);
}

/// The Winsock extension functions, looked up once per process through WSAIoctl (ConnectEx
/// and GetAcceptExSockaddrs are not exported by any import library).
struct Extensions {
  LPFN_ACCEPTEX accept_ex = nullptr;
  LPFN_CONNECTEX connect_ex = nullptr;
  LPFN_GETACCEPTEXSOCKADDRS accept_ex_sockaddrs = nullptr;
};
/// Starts Winsock and looks the extensions up (once); the error if either fails.
std::error_code load_extensions(const Extensions*& out) noexcept;

/// What starting an operation's Winsock call did.
struct Issued {
  enum class Outcome { finished, pending, failed } outcome;
  std::int64_t result;  // finished: bytes (raw; finish() turns it into the result); failed: -errno
};

/// Issues op's call on fd (iocp_operations.cpp). `skip_on_success`: a call that succeeds at
/// once posts no packet (otherwise its packet is awaited like any pending one).
Issued issue(Operation& op, const IocpDescriptor& d, const Extensions& ext) noexcept;
/// After a successful completion (raw: bytes transferred), under the descriptor's lock with its
/// socket open: AcceptEx's and ConnectEx's context updates and the peer address. Returns the
/// operation's result (accept: the new handle).
std::int64_t finish(Operation& op, const IocpDescriptor& d, const Extensions& ext,
                    std::int64_t raw) noexcept;
/// Releases what a failed or discarded operation holds (AcceptEx's pre-created socket).
void abandon(Operation& op) noexcept;
/// A Win32 or WSA error as -errno (wsa_error.cpp's table); EIO for one it does not list
/// (logged with its value).
std::int64_t negative_errno(DWORD error) noexcept;
/// A dequeued OVERLAPPED's status (an NTSTATUS) and byte count as a raw result.
std::int64_t completion_result(const OVERLAPPED& overlapped, DWORD bytes) noexcept;

class IocpEngine final : public EngineCore {
 public:
  IocpEngine(sched::Scheduler& scheduler, const EngineOptions& options)
      : EngineCore(scheduler, options), ports_(static_cast<std::size_t>(poll_sets(options))) {}
  ~IocpEngine() override;
  /// Winsock, the extension functions, one completion port per poll set; then polling.
  std::error_code init();

  const char* name() const noexcept override { return "iocp"; }
  /// For the start-up line: whether completions that finish at once skip the port.
  bool skips_port_on_success() const noexcept {
    return skip_on_success_.load(std::memory_order_relaxed);
  }

  Result<DescriptorRef> attach(Handle handle) noexcept override;
  bool start(Operation& op) noexcept override;
  std::int64_t receive_now(Operation& op) noexcept override;
  void cancel(Operation& op) noexcept override;
  void close(DescriptorRef socket) noexcept override;

 protected:
  void cancel_parked() noexcept override;
  void on_poller_stop(int poller) noexcept override;
  std::size_t wait(int poller, std::int64_t timeout_ns,
                   std::span<sched::Event> out) noexcept override;
  void wake(int poller) noexcept override;
  void backend_counters(EngineCounters& counters) const noexcept override;

 private:
  struct Port {
    HANDLE port = nullptr;
    // A wake packet is queued and not yet dequeued: later wakes need not post another. The
    // poller clears it (acq_rel exchange) when it dequeues the packet, so a waker that finds
    // it set knows the poller will look at the world after the waker's change.
    std::atomic<bool> wake_posted{false};
    std::vector<OVERLAPPED_ENTRY> entries;  // the waiting thread's alone
  };

  // A dequeued (or refused) operation's result to its owner, on a worker.
  static void complete(const sched::Event& event, sched::Disposition) noexcept;
  // Under d.lock, op admitted: its state made afresh, its slot taken, the socket kept open.
  void prepare(IocpDescriptor& d, Operation& op, int side) noexcept;
  // After prepare(), without the lock: makes the call and settles what it did; true if the
  // operation finished (op.result holds its result), false if its packet will complete it.
  bool issue_prepared(IocpDescriptor& d, Operation& op, int side) noexcept;
  // Under d.lock: what the operation's result is once it leaves its slot.
  std::int64_t settle(IocpDescriptor& d, Operation& op, std::int64_t raw) const noexcept;
  // Closes the socket and recycles the descriptor as finish_if_closed() said.
  void finish_close(IocpDescriptor& d, const Descriptor::Finish& finish) noexcept;
  // Operations on `poller`'s sockets whose packet has not been dequeued yet.
  std::size_t awaiting_packets(int poller) noexcept;

  std::vector<Port> ports_;
  DescriptorPool<IocpDescriptor> pool_;
  const Extensions* ext_ = nullptr;
  std::atomic<bool> skip_on_success_{true};  // cleared if any socket refused the mode
  std::atomic<std::uint64_t> inline_finishes_{0};
  std::atomic<std::uint64_t> packets_{0};
  std::atomic<std::uint64_t> reissues_{0};
};

}  // namespace arbor::io::iocp
