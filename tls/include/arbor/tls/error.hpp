// TLS errors: one std::error_code category, "arbor.tls", for everything the TLS layer reports
// itself; failures of the stream underneath (a reset, a timeout, a cancellation) pass through
// unchanged in their own categories.
//
// Invariant: an error_code in this category always names its cause in message(): OpenSSL's
// reason text for a library error ("no application protocol", "wrong version number"), the
// X.509 verifier's text for a certificate the peer sent that failed verification ("hostname
// mismatch", "certificate has expired"), or one of the few conditions below. Values are small
// ints with no meaning beyond this category: compare with the helpers, never with OpenSSL's
// numbers directly.
#pragma once

#include <system_error>

namespace arbor::tls {

/// Conditions the TLS layer names itself.
enum class Errc {
  /// The peer closed the connection without a close_notify alert: whatever was read may be
  /// cut short (a truncation attack looks the same).
  truncated = 1,
  /// Another operation is pending on this stream (one at a time; see stream.hpp).
  busy,
  /// The stream had failed, or was shut down, before this operation.
  not_usable,
};

const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// The peer's certificate failed verification: the X.509 verifier's code (X509_V_ERR_*,
/// e.g. 62 hostname mismatch, 10 expired, 20/21 untrusted issuer), or 0 for any other error.
int verify_error(std::error_code error) noexcept;

/// OpenSSL's reason code (ERR_GET_REASON, e.g. SSL_R_NO_APPLICATION_PROTOCOL) for a library
/// error, or 0 for any other error.
int openssl_reason(std::error_code error) noexcept;

}  // namespace arbor::tls

template <>
struct std::is_error_code_enum<arbor::tls::Errc> : std::true_type {};
