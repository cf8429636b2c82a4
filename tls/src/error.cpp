// The "arbor.tls" category: how an OpenSSL failure becomes an error_code that keeps its reason.
//
// Invariant: the value alone recovers the text, on any thread, later: OpenSSL's error queue is
// per thread and is cleared before each call, so the reason is taken from the queue at once
// and packed into the value (library and reason, ERR_PACK without the function field; 31
// bits), and message() asks OpenSSL for the text of the packed code, not for the queue.
// Ranges: [1, 99] Errc; [100, 100 + X509_V_ERR max] a verify result; at or above
// kLibraryBase a packed library error.
#include <openssl/err.h>
#include <openssl/x509.h>

#include <string>

#include "error_internal.hpp"

namespace arbor::tls {
namespace {

constexpr int kVerifyBase = 100;
constexpr int kVerifyEnd = 100'000;

class Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "arbor.tls"; }
  std::string message(int value) const override {
    switch (static_cast<Errc>(value)) {
      case Errc::truncated:
        return "the peer closed the connection without close_notify (truncated)";
      case Errc::busy:
        return "another operation is pending on this TLS stream";
      case Errc::not_usable:
        return "the TLS stream has failed or was shut down";
    }
    if (value >= kVerifyBase && value < kVerifyEnd)
      return std::string("certificate verify failed: ") +
             X509_verify_cert_error_string(value - kVerifyBase);
    if (value >= kVerifyEnd) {
      const unsigned long packed = static_cast<unsigned long>(value - kVerifyEnd);
      const char* reason = ERR_reason_error_string(packed);
      const char* library = ERR_lib_error_string(packed);
      std::string text =
          reason ? reason : "unknown reason " + std::to_string(ERR_GET_REASON(packed));
      if (library) text += std::string(" (") + library + ")";
      return text;
    }
    return "unknown TLS error " + std::to_string(value);
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const Category category;
  return category;
}

int verify_error(std::error_code error) noexcept {
  if (error.category() != error_category()) return 0;
  const int v = error.value();
  return v >= kVerifyBase && v < kVerifyEnd ? v - kVerifyBase : 0;
}

int openssl_reason(std::error_code error) noexcept {
  if (error.category() != error_category() || error.value() < kVerifyEnd) return 0;
  return ERR_GET_REASON(static_cast<unsigned long>(error.value() - kVerifyEnd));
}

namespace detail {

std::error_code verify_failure(long result) noexcept {
  return {kVerifyBase + static_cast<int>(result), error_category()};
}

std::error_code take_openssl_error() noexcept {
  // The last error is the most specific; the queue is cleared so the next call starts clean.
  const unsigned long e = ERR_peek_last_error();
  ERR_clear_error();
  if (e == 0) return make_error_code(Errc::not_usable);
  if (ERR_SYSTEM_ERROR(e)) return {static_cast<int>(ERR_GET_REASON(e)), std::system_category()};
  // Library and reason only: 8 + 23 bits, which leave room for kVerifyEnd below INT_MAX.
  const unsigned long packed = ERR_PACK(ERR_GET_LIB(e), 0, ERR_GET_REASON(e)) & 0x7fffffffUL;
  if (packed > static_cast<unsigned long>(0x7fffffff - kVerifyEnd))
    return make_error_code(Errc::not_usable);
  return {kVerifyEnd + static_cast<int>(packed), error_category()};
}

}  // namespace detail
}  // namespace arbor::tls
