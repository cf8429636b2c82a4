// RequestParser: a strict, bounded, incremental HTTP/1.1 request-head parser.
//
// It reads the head in place, from the connection's own buffer, and allocates nothing: the
// Request it produces is a set of views into that buffer, valid until the buffer changes.
// "Incremental" means a request may arrive split at any byte: parse() is called again with
// the same bytes plus whatever came since, and the scan for the end of the head resumes where
// it stopped (so a head trickling in byte by byte costs O(n), not O(n²)).
//
// Strict: one grammar (RFC 9112), no guessing. CRLF line ends only (a bare LF is an error),
// no obsolete line folding, tokens where tokens belong, no whitespace before a colon, one
// Content-Length value, Host required in HTTP/1.1, and Content-Length together with
// Transfer-Encoding rejected (the classic request-smuggling ambiguity). Every error carries
// the status to answer with; the connection is closed after any error.
//
// Bounded: the request line, the whole head, the number of header fields and the declared body
// size each have a limit, checked as soon as the bytes seen exceed it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace arbor::http {

struct Limits {
  std::size_t max_request_line = 8 * 1024;  // longer: 414
  std::size_t max_head = 16 * 1024;         // request line + header fields; larger: 431
  std::size_t max_fields = 64;              // more header fields: 431
  std::uint64_t max_body = 1024 * 1024;     // larger Content-Length: 413
};

struct Field {
  std::string_view name;
  std::string_view value;  // without surrounding whitespace
};

struct Request {
  std::string_view method;
  std::string_view target;
  int version_minor = 1;  // HTTP/1.0 or HTTP/1.1
  bool keep_alive = true;
  std::uint64_t content_length = 0;
  std::span<const Field> fields;

  /// The first field called `name` (case-insensitive), or an empty view.
  std::string_view field(std::string_view name) const noexcept;
};

class RequestParser {
 public:
  enum class Status { complete, incomplete, error };

  static constexpr std::size_t kMaxFields = 128;

  /// Limits outside what the parser can hold (max_fields > kMaxFields, zero sizes) are clamped.
  explicit RequestParser(Limits limits = {}) noexcept;

  /// Parses the request head at the start of `data`. complete: request() and head_size() are
  /// valid. incomplete: call again once more bytes follow these. error: error_status() says
  /// what to answer (400, 413, 414, 431, 501 or 505).
  Status parse(std::span<const char> data) noexcept;

  const Request& request() const noexcept { return request_; }
  std::size_t head_size() const noexcept { return head_size_; }
  int error_status() const noexcept { return error_; }
  const Limits& limits() const noexcept { return limits_; }

  /// Ready for the next request (pipelined or after a body).
  void reset() noexcept;

 private:
  Status fail(int status) noexcept;
  Status parse_request_line(std::string_view line) noexcept;
  Status parse_head(std::string_view head) noexcept;

  Limits limits_;
  Request request_;
  std::array<Field, kMaxFields> fields_{};
  std::size_t scanned_ = 0;   // bytes already searched for the end of the head
  std::size_t line_end_ = 0;  // end of the request line once found (its '\n' + 1), else 0
  std::size_t head_size_ = 0;
  int error_ = 0;
};

/// The reason phrase of a status code this module produces ("OK", "Not Found", …).
std::string_view reason_phrase(int status) noexcept;

}  // namespace arbor::http
