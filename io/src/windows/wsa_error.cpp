// Winsock and Win32 errors as errno-valued std::error_codes: the one table that maps them.
//
// arbor reports socket failures as errno values (errno_code(), arbor/result.hpp), so callers
// compare them with std::errc, and check for EMFILE or ECONNABORTED, the same way on every
// platform. That needs this table: no standard library maps WSAE* codes to std::errc (libstdc++
// for mingw-w64 compares system_category()'s WSAEADDRINUSE equal to no errc at all). Only
// errors the public socket API and the IOCP engine can meet are listed; any other
// Winsock value stays what it is, a Windows error code in system_category(): its message is
// Windows' own, it just compares equal to no errc.
#include <winsock2.h>

#include <cerrno>

#include "arbor/result.hpp"
#include "windows/winsock.hpp"

namespace arbor::io::windows {
namespace {

struct Mapping {
  int wsa;
  int posix;
};

constexpr Mapping kMappings[] = {
    {WSAEINTR, EINTR},
    {WSAEBADF, EBADF},
    {WSAEACCES, EACCES},
    {WSAEFAULT, EFAULT},
    {WSAEINVAL, EINVAL},
    {WSAEMFILE, EMFILE},
    {WSAEWOULDBLOCK, EWOULDBLOCK},
    {WSAEINPROGRESS, EINPROGRESS},
    {WSAEALREADY, EALREADY},
    {WSAENOTSOCK, ENOTSOCK},
    {WSAEDESTADDRREQ, EDESTADDRREQ},
    {WSAEMSGSIZE, EMSGSIZE},
    {WSAEPROTOTYPE, EPROTOTYPE},
    {WSAENOPROTOOPT, ENOPROTOOPT},
    {WSAEPROTONOSUPPORT, EPROTONOSUPPORT},
    {WSAEOPNOTSUPP, EOPNOTSUPP},
    {WSAEAFNOSUPPORT, EAFNOSUPPORT},
    {WSAEADDRINUSE, EADDRINUSE},
    {WSAEADDRNOTAVAIL, EADDRNOTAVAIL},
    {WSAENETDOWN, ENETDOWN},
    {WSAENETUNREACH, ENETUNREACH},
    {WSAENETRESET, ENETRESET},
    {WSAECONNABORTED, ECONNABORTED},
    {WSAECONNRESET, ECONNRESET},
    {WSAENOBUFS, ENOBUFS},
    {WSAEISCONN, EISCONN},
    {WSAENOTCONN, ENOTCONN},
    {WSAESHUTDOWN, EPIPE},  // sending after shutdown(write): what POSIX reports
    {WSAETIMEDOUT, ETIMEDOUT},
    {WSAECONNREFUSED, ECONNREFUSED},
    {WSAEHOSTUNREACH, EHOSTUNREACH},
    {WSA_OPERATION_ABORTED, ECANCELED},  // an overlapped operation cancelled or its socket closed
    {WSA_NOT_ENOUGH_MEMORY, ENOMEM},
    // Win32 errors: what a completion packet's NTSTATUS becomes (RtlNtStatusToDosError), for
    // operations the IOCP engine started. Their values (< 10000) never collide with WSAE*.
    {ERROR_NETNAME_DELETED, ECONNRESET},       // STATUS_CONNECTION_RESET, _LOCAL/_REMOTE_DISCONNECT
    {ERROR_CONNECTION_ABORTED, ECONNABORTED},  // STATUS_CONNECTION_ABORTED
    {ERROR_CONNECTION_REFUSED, ECONNREFUSED},  // STATUS_CONNECTION_REFUSED
    {ERROR_PORT_UNREACHABLE, ECONNREFUSED},    // ICMP port unreachable (connected datagrams)
    {ERROR_NETWORK_UNREACHABLE, ENETUNREACH},
    {ERROR_HOST_UNREACHABLE, EHOSTUNREACH},
    {ERROR_SEM_TIMEOUT, ETIMEDOUT},  // STATUS_IO_TIMEOUT: the connect timed out
    {ERROR_GRACEFUL_DISCONNECT, EPIPE},
    {ERROR_PIPE_NOT_CONNECTED, EPIPE},  // STATUS_PIPE_DISCONNECTED: that side was shut down
    {ERROR_CONNECTION_INVALID, ENOTCONN},
    {ERROR_ADDRESS_ALREADY_ASSOCIATED, EADDRINUSE},
    {ERROR_DUP_NAME, EADDRINUSE},  // STATUS_ADDRESS_ALREADY_EXISTS
    {ERROR_INVALID_NETNAME, EADDRNOTAVAIL},
    {ERROR_OUTOFMEMORY, ENOMEM},
    {ERROR_INVALID_PARAMETER, EINVAL},
    {ERROR_INVALID_HANDLE, EBADF},
    {ERROR_MORE_DATA, EMSGSIZE},
};

}  // namespace

std::error_code from_wsa_error(int wsa_error) noexcept {
  for (const Mapping& m : kMappings)
    if (m.wsa == wsa_error) return errno_code(m.posix);
  return {wsa_error, std::system_category()};
}

std::error_code last_socket_error() noexcept {
  return from_wsa_error(::WSAGetLastError());
}

}  // namespace arbor::io::windows
