// How the TLS layer's sources turn OpenSSL's state into error_codes (error.cpp): private.
//
// Invariant: each function reads OpenSSL's per-thread error queue on the thread that made the
// failing call, before the task can move to another worker, and leaves the queue empty.
#pragma once

#include <system_error>

#include "arbor/tls/error.hpp"

namespace arbor::tls::detail {

/// The most specific error on this thread's OpenSSL queue (then clears it).
std::error_code take_openssl_error() noexcept;
/// A failed certificate verification: `result` is SSL_get_verify_result's X509_V_ERR_*.
std::error_code verify_failure(long result) noexcept;

}  // namespace arbor::tls::detail
