// The Winsock call behind each operation kind, and what a successful one needs afterwards.
//
// Invariant: every call here is overlapped, on the operation's own OVERLAPPED (IocpOp), so its
// completion reaches the socket's port unless it failed at once (no packet then) or succeeded
// at once on a socket that skips the port on success. Whatever the kernel writes after the call
// returns (receive flags, WSARecvFrom's address length, AcceptEx's addresses) lives in IocpOp.
// winsock2.h before anything that includes windows.h (common/sockaddr.hpp says why).
// The order matters, not the alphabet.
// clang-format off
#include <winsock2.h>
#include <winternl.h>  // RtlNtStatusToDosError
// clang-format on

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>

#include "arbor/internal/log.hpp"
#include "windows/iocp_engine.hpp"
#include "windows/winsock.hpp"

namespace arbor::io::iocp {
namespace {

SOCKET socket_of(Handle h) noexcept {
  return static_cast<SOCKET>(h);
}

ULONG clamp_length(std::size_t size) noexcept {
  return static_cast<ULONG>(std::min<std::size_t>(size, ULONG_MAX));
}

// The Winsock call's return (0 / TRUE meaning done) as an outcome; the error is read here.
// Callers make the call first and pass its return: made inside this argument list, the call may
// run after `bytes` was copied (the order is unspecified; mingw's GCC copies first), and a send
// that finished at once would report 0 bytes, so its caller would send the data again.
Issued outcome(bool succeeded, DWORD bytes, bool skip_on_success) noexcept {
  if (succeeded) {
    if (skip_on_success) return {Issued::Outcome::finished, static_cast<std::int64_t>(bytes)};
    return {Issued::Outcome::pending, 0};  // its packet comes anyway
  }
  const int error = ::WSAGetLastError();
  if (error == WSA_IO_PENDING) return {Issued::Outcome::pending, 0};
  return {Issued::Outcome::failed, negative_errno(static_cast<DWORD>(error))};
}

template <class Fn>
bool load_one(SOCKET s, GUID guid, Fn& out) noexcept {
  DWORD bytes = 0;
  return ::WSAIoctl(s, SIO_GET_EXTENSION_FUNCTION_POINTER, &guid, sizeof guid, &out, sizeof out,
                    &bytes, nullptr, nullptr) == 0;
}

// ConnectEx needs a bound socket: the wildcard address of its family, port 0. A socket bound
// before (WSAEINVAL) is fine as it is.
std::int64_t bind_for_connect(SOCKET s, int family) noexcept {
  sockaddr_storage any{};
  int length;
  if (family == AF_INET6) {
    auto& a = reinterpret_cast<sockaddr_in6&>(any);
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    length = sizeof a;
  } else {
    auto& a = reinterpret_cast<sockaddr_in&>(any);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    length = sizeof a;
  }
  if (::bind(s, reinterpret_cast<const sockaddr*>(&any), length) == 0) return 0;
  const int error = ::WSAGetLastError();
  return error == WSAEINVAL ? 0 : negative_errno(static_cast<DWORD>(error));
}

}  // namespace

std::error_code load_extensions(const Extensions*& out) noexcept {
  static Extensions ext;
  static std::error_code failure;
  static std::once_flag once;
  std::call_once(once, [] {
    if ((failure = windows::winsock_start())) return;
    const SOCKET s = ::WSASocketW(AF_INET, SOCK_STREAM, IPPROTO_TCP, nullptr, 0,
                                  WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
    if (s == INVALID_SOCKET) {
      failure = windows::last_socket_error();
      return;
    }
    const GUID accept_ex = WSAID_ACCEPTEX, connect_ex = WSAID_CONNECTEX,
               sockaddrs = WSAID_GETACCEPTEXSOCKADDRS;
    if (!load_one(s, accept_ex, ext.accept_ex) || !load_one(s, connect_ex, ext.connect_ex) ||
        !load_one(s, sockaddrs, ext.accept_ex_sockaddrs))
      failure = windows::last_socket_error();
    if (::closesocket(s) != 0) log::debug("iocp: closing the probe socket failed");
  });
  out = &ext;
  return failure;
}

Issued issue(Operation& op, const IocpDescriptor& d, const Extensions& ext) noexcept {
  IocpOp& state = state_of<IocpOp>(op);
  const SOCKET s = socket_of(d.fd);
  const bool skip = d.skip_on_success;
  DWORD bytes = 0;
  switch (op.kind) {
    case OpKind::receive:
    case OpKind::receive_from: {
      WSABUF buffer{clamp_length(op.size), static_cast<char*>(op.data)};
      state.flags = 0;
      int r;
      if (op.kind == OpKind::receive) {
        r = ::WSARecv(s, &buffer, 1, &bytes, &state.flags, &state.overlapped, nullptr);
      } else {
        state.address_size = static_cast<INT>(Address::capacity());
        r = ::WSARecvFrom(s, &buffer, 1, &bytes, &state.flags,
                          op.address ? static_cast<sockaddr*>(op.address->native()) : nullptr,
                          op.address ? &state.address_size : nullptr, &state.overlapped, nullptr);
      }
      return outcome(r == 0, bytes, skip);
    }
    case OpKind::readable: {
      // The zero-byte receive: it completes when data (or the end) arrives, and moves nothing,
      // so no buffer is pinned while the socket waits.
      WSABUF buffer{0, nullptr};
      state.flags = 0;
      const int r = ::WSARecv(s, &buffer, 1, &bytes, &state.flags, &state.overlapped, nullptr);
      return outcome(r == 0, bytes, skip);
    }
    case OpKind::send: {
      WSABUF buffer{clamp_length(op.size), static_cast<char*>(op.data)};
      const int r = ::WSASend(s, &buffer, 1, &bytes, 0, &state.overlapped, nullptr);
      return outcome(r == 0, bytes, skip);
    }
    case OpKind::send_vectored: {
      // WSASend captures the WSABUF array before it returns, so it may live on this stack.
      WSABUF buffers[kMaxGather];
      const auto* in = static_cast<const ConstBuffer*>(op.data);
      const std::size_t count = std::min(op.size, kMaxGather);
      for (std::size_t i = 0; i < count; ++i)
        buffers[i] = {clamp_length(in[i].size), static_cast<char*>(const_cast<void*>(in[i].data))};
      const int r =
          ::WSASend(s, buffers, static_cast<DWORD>(count), &bytes, 0, &state.overlapped, nullptr);
      return outcome(r == 0, bytes, skip);
    }
    case OpKind::send_to: {
      WSABUF buffer{clamp_length(op.size), static_cast<char*>(op.data)};
      const int r =
          ::WSASendTo(s, &buffer, 1, &bytes, 0, static_cast<const sockaddr*>(op.address->native()),
                      static_cast<int>(op.address->native_size()), &state.overlapped, nullptr);
      return outcome(r == 0, bytes, skip);
    }
    case OpKind::accept: {
      state.accepted = ::WSASocketW(d.family, SOCK_STREAM, IPPROTO_TCP, nullptr, 0,
                                    WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT);
      if (state.accepted == INVALID_SOCKET)
        return {Issued::Outcome::failed, negative_errno(static_cast<DWORD>(::WSAGetLastError()))};
      const BOOL ok = ext.accept_ex(s, state.accepted, state.addresses, 0, kAcceptAddressSlot,
                                    kAcceptAddressSlot, &bytes, &state.overlapped);
      Issued issued = outcome(ok != FALSE, bytes, skip);
      if (issued.outcome == Issued::Outcome::failed) abandon(op);
      return issued;
    }
    case OpKind::connect: {
      if (const std::int64_t bound = bind_for_connect(s, d.family); bound < 0)
        return {Issued::Outcome::failed, bound};
      const BOOL ok = ext.connect_ex(s, static_cast<const sockaddr*>(op.address->native()),
                                     static_cast<int>(op.address->native_size()), nullptr, 0,
                                     nullptr, &state.overlapped);
      return outcome(ok != FALSE, 0, skip);
    }
  }
  return {Issued::Outcome::failed, -EINVAL};
}

std::int64_t finish(Operation& op, const IocpDescriptor& d, const Extensions& ext,
                    std::int64_t raw) noexcept {
  IocpOp& state = state_of<IocpOp>(op);
  const SOCKET s = socket_of(d.fd);
  switch (op.kind) {
    case OpKind::accept: {
      // The accepted socket inherits the listener's properties only after this; getpeername,
      // shutdown and the rest need it.
      if (::setsockopt(state.accepted, SOL_SOCKET, SO_UPDATE_ACCEPT_CONTEXT,
                       reinterpret_cast<const char*>(&s), sizeof s) != 0) {
        const int error = ::WSAGetLastError();
        abandon(op);
        return negative_errno(static_cast<DWORD>(error));
      }
      u_long non_blocking = 1;  // as accept4(SOCK_NONBLOCK) hands it out on POSIX
      if (::ioctlsocket(state.accepted, FIONBIO, &non_blocking) != 0) {
        const int error = ::WSAGetLastError();
        abandon(op);
        return negative_errno(static_cast<DWORD>(error));
      }
      if (op.address != nullptr) {
        sockaddr* local = nullptr;
        sockaddr* peer = nullptr;
        INT local_size = 0, peer_size = 0;
        ext.accept_ex_sockaddrs(state.addresses, 0, kAcceptAddressSlot, kAcceptAddressSlot, &local,
                                &local_size, &peer, &peer_size);
        if (peer != nullptr && peer_size > 0 &&
            static_cast<std::uint32_t>(peer_size) <= Address::capacity()) {
          std::memcpy(op.address->native(), peer, static_cast<std::size_t>(peer_size));
          op.address->set_native_size(static_cast<std::uint32_t>(peer_size));
        }
      }
      return static_cast<std::int64_t>(state.accepted);
    }
    case OpKind::receive_from:
      if (raw >= 0 && op.address != nullptr)
        op.address->set_native_size(static_cast<std::uint32_t>(state.address_size));
      return raw;
    case OpKind::connect:
      // Without it the socket does not know it is connected (getpeername, shutdown fail).
      if (::setsockopt(s, SOL_SOCKET, SO_UPDATE_CONNECT_CONTEXT, nullptr, 0) != 0)
        return negative_errno(static_cast<DWORD>(::WSAGetLastError()));
      return 0;
    default:
      return raw;
  }
}

void abandon(Operation& op) noexcept {
  if (op.kind != OpKind::accept) return;
  IocpOp& state = state_of<IocpOp>(op);
  if (state.accepted == INVALID_SOCKET) return;
  if (::closesocket(state.accepted) != 0)
    log::debug("iocp: closing an unused accept socket failed ({})", ::WSAGetLastError());
  state.accepted = INVALID_SOCKET;
}

std::int64_t negative_errno(DWORD error) noexcept {
  const std::error_code code = windows::from_wsa_error(static_cast<int>(error));
  if (code.category() == std::generic_category()) return -code.value();
  log::warn("iocp: Windows error {} has no errno counterpart; reported as EIO", error);
  return -EIO;
}

std::int64_t completion_result(const OVERLAPPED& overlapped, DWORD bytes) noexcept {
  const auto status = static_cast<NTSTATUS>(overlapped.Internal);
  // STATUS_BUFFER_OVERFLOW: a datagram larger than the buffer, whose tail Windows discarded.
  // Reported (EMSGSIZE, as the POSIX engines report it), not passed off as a whole datagram.
  constexpr NTSTATUS kBufferOverflow = static_cast<NTSTATUS>(0x80000005L);
  if (status == kBufferOverflow) return -EMSGSIZE;
  // A call cancelled after it moved bytes reports them: they left the socket's buffers, so
  // reporting the cancel instead would lose them (or, for a send issued again, repeat them).
  constexpr NTSTATUS kCancelled = static_cast<NTSTATUS>(0xC0000120L);
  if (status >= 0 || (status == kCancelled && bytes > 0)) return static_cast<std::int64_t>(bytes);
  return negative_errno(::RtlNtStatusToDosError(status));
}

}  // namespace arbor::io::iocp
