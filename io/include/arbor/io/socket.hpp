// Synchronous socket helpers: create, bind, listen, options, addresses.
//
// These are the calls that never wait, so they need no engine; the asynchronous operations go
// through Engine::start(). Every function reports failure as a value. Handles are created
// non-blocking and close-on-exec.
#pragma once

#include "arbor/address.hpp"
#include "arbor/io/operation.hpp"
#include "arbor/result.hpp"

namespace arbor::io {

enum class SocketType { tcp, udp };

/// A new socket for `family_of`'s address family.
Result<Handle> open_socket(const Address& family_of, SocketType type) noexcept;
std::error_code bind(Handle handle, const Address& address) noexcept;
std::error_code listen(Handle handle, int backlog) noexcept;
/// Which directions shutdown() ends: `read` makes pending and later reads see end of stream,
/// `write` sends FIN after what is queued, `both` does both.
enum class ShutdownHow { read, write, both };
/// Ends one or both directions of a connected socket without closing it (the handle stays
/// valid and owned by whoever owned it). Safe to call from any thread while operations are
/// pending on the socket: they complete as the direction ends.
std::error_code shutdown(Handle handle, ShutdownHow how) noexcept;
/// Bytes that have arrived on a connected socket and wait to be read (FIONREAD).
Result<std::size_t> bytes_readable(Handle handle) noexcept;
/// Closes a handle that is not attached to an engine.
void close_handle(Handle handle) noexcept;

enum class BoolOption { reuse_address, reuse_port, no_delay, keep_alive, v6_only };
enum class IntOption { receive_buffer, send_buffer };
std::error_code set_option(Handle handle, BoolOption option, bool value) noexcept;
Result<bool> get_option(Handle handle, BoolOption option) noexcept;
std::error_code set_option(Handle handle, IntOption option, int value) noexcept;
Result<int> get_option(Handle handle, IntOption option) noexcept;
/// SO_LINGER with a zero timeout: close() then sends a reset instead of a FIN.
std::error_code set_linger_reset(Handle handle) noexcept;

Result<Address> local_address(Handle handle) noexcept;
Result<Address> peer_address(Handle handle) noexcept;

/// Makes writes to a closed peer an error (EPIPE) instead of a process-killing SIGPIPE. The
/// engines also pass MSG_NOSIGNAL, so this only guards code that writes with plain write(2).
void ignore_sigpipe() noexcept;

}  // namespace arbor::io
