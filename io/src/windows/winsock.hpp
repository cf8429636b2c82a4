// Winsock for the rest of io/: started once per process, its errors as errno-valued codes.
//
// Every entry point that makes a socket calls winsock_start() first (Winsock refuses socket
// calls until WSAStartup has run in the process); it is cheap after the first call. Errors
// are reported as errno values, the way the POSIX build reports them (errno_code() in
// arbor/result.hpp), so callers compare them with std::errc on every platform.
#pragma once

#include <system_error>

namespace arbor::io::windows {

/// WSAStartup(2.2), once per process (later calls return the first call's result). The
/// matching WSACleanup is left to process exit: sockets may be closed from static destructors.
std::error_code winsock_start() noexcept;

/// A Winsock error (WSAGetLastError() or a WSAStartup result), or a Win32 error a completion
/// packet's status maps to, as an error code: the errno value it corresponds to (errno_code()),
/// or the Windows value in system_category() where none fits.
std::error_code from_wsa_error(int wsa_error) noexcept;

/// from_wsa_error(WSAGetLastError()).
std::error_code last_socket_error() noexcept;

}  // namespace arbor::io::windows
