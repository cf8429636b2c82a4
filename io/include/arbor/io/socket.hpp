// Synchronous socket helpers: create, bind, listen, options, addresses.
//
// These are the calls that never wait, so they need no engine; the asynchronous operations go
// through Engine::start(). Every function reports failure as a value. Handles are created
// non-blocking and close-on-exec.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "arbor/address.hpp"
#include "arbor/io/operation.hpp"
#include "arbor/result.hpp"

namespace arbor::io {

/// stream and datagram name the same kinds for Unix-domain sockets.
enum class SocketType { tcp, udp, stream = tcp, datagram = udp };

/// A new socket for `family_of`'s address family (IPv4, IPv6 or Unix).
Result<Handle> open_socket(const Address& family_of, SocketType type) noexcept;
/// Two connected Unix-domain sockets (socketpair(2)), each owned by the caller. Windows has no
/// socketpair: operation_not_supported.
struct HandlePair {
  Handle first = kInvalidHandle;
  Handle second = kInvalidHandle;
};
Result<HandlePair> socket_pair(SocketType type) noexcept;
/// Who is at the other end of a connected Unix-domain socket, as the kernel recorded it when
/// the connection was made (SO_PEERCRED). Linux only; elsewhere operation_not_supported.
struct PeerCredentials {
  std::int64_t pid = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
};
Result<PeerCredentials> peer_credentials(Handle handle) noexcept;
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

/// connect(2) for the sockets whose connect never waits: a datagram socket (the kernel only
/// records the default peer: sends without an address go there, and only its datagrams are
/// received) and a Unix-domain stream (made or refused at once). TCP connects through the
/// engine (OpKind::connect).
std::error_code connect_now(Handle handle, const Address& peer) noexcept;

/// broadcast: SO_BROADCAST, a datagram socket may send to a broadcast address.
/// multicast_loop_v4: IP_MULTICAST_LOOP, this host's own members get what it sends (default on).
enum class BoolOption {
  reuse_address,
  reuse_port,
  no_delay,
  keep_alive,
  v6_only,
  broadcast,
  multicast_loop_v4
};
enum class IntOption { receive_buffer, send_buffer };
std::error_code set_option(Handle handle, BoolOption option, bool value) noexcept;
Result<bool> get_option(Handle handle, BoolOption option) noexcept;
std::error_code set_option(Handle handle, IntOption option, int value) noexcept;
Result<int> get_option(Handle handle, IntOption option) noexcept;
/// SO_LINGER with a zero timeout: close() then sends a reset instead of a FIN.
std::error_code set_linger_reset(Handle handle) noexcept;
/// SO_LINGER: with a timeout, closing the handle waits (blocking the closing thread) up to that
/// long for unsent data to leave, then resets; std::nullopt turns it off (the default: close
/// returns at once and the kernel sends what is queued). A zero timeout is set_linger_reset().
std::error_code set_linger(Handle handle, std::optional<std::chrono::seconds> timeout) noexcept;
Result<std::optional<std::chrono::seconds>> get_linger(Handle handle) noexcept;

/// TCP keep-alive timing: after `idle` without traffic a probe is sent, then one every
/// `interval`; `count` unanswered probes end the connection (reads fail with timed_out).
/// Whole seconds, each at least 1 (invalid_argument otherwise).
struct KeepAlive {
  std::chrono::seconds idle{7200};
  std::chrono::seconds interval{75};
  int count = 9;
};
/// Turns keep-alive on (SO_KEEPALIVE) with `timing`. Where the platform cannot set one of
/// the three, operation_not_supported, and keep-alive is left as it was.
std::error_code set_keep_alive(Handle handle, const KeepAlive& timing) noexcept;
/// The timing in force (whether or not keep-alive is on: get_option(keep_alive) says that).
Result<KeepAlive> get_keep_alive(Handle handle) noexcept;

/// Joins or leaves the IPv4 multicast group `group` (its port is ignored) on the interface whose
/// address is `local_interface` (0.0.0.0: the system chooses). A group that is not multicast or not
/// IPv4, or an IPv6 socket, is invalid_argument.
enum class Membership { join, leave };
std::error_code multicast_membership_v4(Handle handle, const Address& group,
                                        const Address& local_interface, Membership how) noexcept;
/// The same for an IPv6 group, on the interface with index `interface_index` (0: the system
/// chooses).
std::error_code multicast_membership_v6(Handle handle, const Address& group,
                                        std::uint32_t interface_index, Membership how) noexcept;
/// The interface (by its IPv4 address) multicast datagrams leave from (IP_MULTICAST_IF).
std::error_code set_multicast_interface_v4(Handle handle, const Address& local_interface) noexcept;

Result<Address> local_address(Handle handle) noexcept;
Result<Address> peer_address(Handle handle) noexcept;

/// Makes writes to a closed peer an error (EPIPE) instead of a process-killing SIGPIPE. The
/// engines also pass MSG_NOSIGNAL, so this only guards code that writes with plain write(2).
void ignore_sigpipe() noexcept;

}  // namespace arbor::io
