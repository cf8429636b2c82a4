// resolve: host names to addresses, for tasks.
//
//   auto addresses = co_await arbor::resolve(rt, "localhost", 8080);   // every v4 and v6 one
//   auto stream = co_await arbor::TcpStream::connect(rt, "localhost:8080");  // tries them
//
// A numeric host ("127.0.0.1", "::1") is parsed at once, without a thread. A name goes to the
// system's resolver, getaddrinfo(), on the runtime's blocking pool (spawn_blocking.hpp): it
// sees what the rest of the machine sees (/etc/hosts, nsswitch, the search domains), and
// docs/benchmarks.md ("Names") measures why that beat bringing c-ares in. The addresses come
// back in getaddrinfo's order (RFC 6724's preference); connect() interleaves the families.
//
// Cancellation: the awaiting task returns operation_canceled promptly (timed_out under
// with_timeout or the timeout overload) while getaddrinfo, which cannot be interrupted, runs
// on to its end on its pool thread; its answer is then dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>
#include <system_error>
#include <vector>

#include "arbor/address.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

class Runtime;

/// Why a name did not resolve (category "arbor.resolve"). Bad input (an empty or over-long
/// host, an embedded NUL, a bad port) is std::errc::invalid_argument instead.
enum class ResolveErrc {
  host_not_found = 1,  // the name does not exist, or has no address (EAI_NONAME, EAI_NODATA)
  try_again,           // the resolver could not answer now (EAI_AGAIN): try later
  failed,              // the resolver failed for good (EAI_FAIL, or a code arbor does not know)
};
const std::error_category& resolve_category() noexcept;
inline std::error_code make_error_code(ResolveErrc e) noexcept {
  return {static_cast<int>(e), resolve_category()};
}

/// The addresses of `host` (a name or a numeric IPv4/IPv6 address, without brackets) with
/// `port`, IPv4 and IPv6, each once. Never empty on success. Runs the lookup on `runtime`'s
/// blocking pool; the vector is the caller's.
Task<Result<std::vector<Address>>> resolve(Runtime& runtime, std::string_view host,
                                           std::uint16_t port);
/// The same for "host:port" or "[v6]:port".
Task<Result<std::vector<Address>>> resolve(Runtime& runtime, std::string_view host_port);
/// With a timeout: timed_out when it passes (the lookup runs on, its answer dropped).
Task<Result<std::vector<Address>>> resolve(Runtime& runtime, std::string_view host_port,
                                           std::chrono::milliseconds timeout);

namespace detail {
/// getaddrinfo's return code `rc` (an EAI_* value) as an error: ResolveErrc, or
/// invalid_argument / not_enough_memory / errno for what is not about the name.
std::error_code from_getaddrinfo(int rc) noexcept;
/// The system resolver, blocking: what resolve() runs on the pool. `host` is validated.
Result<std::vector<Address>> resolve_blocking(std::string_view host, std::uint16_t port);
}  // namespace detail

}  // namespace arbor

template <>
struct std::is_error_code_enum<arbor::ResolveErrc> : std::true_type {};
