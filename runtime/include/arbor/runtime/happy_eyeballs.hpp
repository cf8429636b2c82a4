// Happy Eyeballs (RFC 8305): connecting to a name that has several addresses.
//
//   auto stream = co_await arbor::TcpStream::connect(rt, "localhost:8080");  // uses this
//
// The attempts go in connection_attempt_order(): the families alternate, starting with the
// resolver's first choice, so a dead IPv6 path costs one stagger, not every v6 address's
// timeout. Each attempt starts when the one before it fails, or `stagger` (RFC 8305's 250 ms
// Connection Attempt Delay) after it started, whichever comes first; the first to connect
// wins and the others are cancelled (a late success is closed). They run as children of one
// task group, so none outlives the call.
#pragma once

#include <chrono>
#include <system_error>
#include <vector>

#include "arbor/address.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/runtime/tcp_stream.hpp"

namespace arbor {

class Runtime;

/// RFC 8305 section 4's order: the first address, then alternately one of the other family and
/// one of the first, each family in the order given; what is left of one family goes last.
std::vector<Address> connection_attempt_order(std::vector<Address> addresses);

/// Connects to the first of `addresses` (tried in connection_attempt_order) that accepts.
/// When all fail, the error is connection_failure()'s choice among theirs, or
/// invalid_argument for an empty list. Cancelling the caller cancels every attempt.
Task<Result<TcpStream>> connect_first(
    Runtime& runtime, std::vector<Address> addresses,
    std::chrono::milliseconds stagger = std::chrono::milliseconds(250));

/// Which error a connect that failed on every address reports, from theirs in attempt order
/// (empty, or cancelled, entries skipped): an answer from a host at the address
/// (connection_refused, connection_reset) over the rest (timed_out, host_unreachable, ...),
/// and those over an error that says this host cannot use the address at all
/// (network_unreachable, address_not_available, address_family_not_supported); among equals,
/// the earliest attempt's. "Refused" on 127.0.0.1 tells more than anything a ::1 that is not
/// configured gives, and the same failures always give the same error, whichever attempt
/// ended last. Nothing left: operation_canceled.
std::error_code connection_failure(const std::vector<std::error_code>& in_attempt_order);

}  // namespace arbor
