// RequestParser: a strict, bounded, incremental HTTP/1.1 request-head parser.
//
// It reads the head in place, from the connection's own buffer, and allocates nothing: the
// Request it produces is a set of views into that buffer, valid until the buffer changes.
// "Incremental" means a request may arrive split at any byte: parse() is called again with
// the same bytes plus whatever came since, and the scan for the end of the head resumes where
// it stopped (so a head trickling in byte by byte costs O(n), not O(n²)).
//
// Strict: one grammar (RFC 9112), no guessing. CRLF line ends only (a bare LF is an error;
// the one exception is up to kMaxLeadingEmptyLines empty lines, CRLF or bare LF, before a
// request line, which RFC 9112 §2.2 asks a server to ignore), no obsolete line folding, tokens
// where tokens belong, no whitespace before a colon, one Content-Length value, Host required in
// HTTP/1.1, Transfer-Encoding only as "chunked" alone (Request::chunked; the body is then
// ChunkedDecoder's, below), and Content-Length together with Transfer-Encoding rejected (the
// classic request-smuggling ambiguity). Every error carries the status to answer with; the
// connection is closed after any error.
//
// Bounded: the request line, the whole head, the number of header fields and the declared body
// size each have a limit, checked as soon as the bytes seen exceed it. The request line is
// checked byte by byte as it arrives: the first byte that cannot belong to a method (tchar), a
// request-target (visible ASCII) or "HTTP/d.d" CRLF fails it at once, so garbage (a TLS hello
// sent to a plaintext port, say) is refused without waiting for a line end or a timeout.
//
// Request targets: origin-form ("/path?query") and absolute-form ("http://host/path?query",
// which RFC 9112 §3.2.2 says a server MUST accept) give path, query and host; asterisk-form
// and authority-form are passed through as path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace arbor::http {

struct Limits {
  std::size_t max_request_line = 8 * 1024;  // longer: 414
  std::size_t max_head = 16 * 1024;         // request line + header fields; larger: 431
  std::size_t max_fields = 100;             // more header fields: 431
  std::uint64_t max_body = 1024 * 1024;     // larger Content-Length: 413
};

struct Field {
  std::string_view name;
  std::string_view value;  // without surrounding whitespace
};

struct Request {
  std::string_view method;
  std::string_view target;  // as received
  // From the target: the path ("/" for an absolute-form target with an empty path; the whole
  // target for asterisk- and authority-form) and the query (after '?', without it).
  std::string_view path;
  std::string_view query;
  // The authority of an absolute-form target, which then wins over the Host field (RFC 9112
  // §3.2.2); otherwise the Host field's value (empty if none, as HTTP/1.0 allows).
  std::string_view host;
  int version_minor = 1;  // HTTP/1.0 or HTTP/1.1
  bool keep_alive = true;
  std::uint64_t content_length = 0;
  bool chunked = false;  // Transfer-Encoding: chunked (then content_length is 0)
  std::span<const Field> fields;
  // The whole body (Content-Length, or chunked and decoded). The parser leaves it empty; the
  // server reads the body in full (at most Limits::max_body) and sets it before the handler
  // runs.
  std::string_view body;

  /// The first field called `name` (case-insensitive), or an empty view.
  std::string_view field(std::string_view name) const noexcept;
};

class RequestParser {
 public:
  enum class Status { complete, incomplete, error };

  /// The most header fields a parser can be asked to hold (the --max-headers bound).
  static constexpr std::size_t kMaxFields = 1000;
  /// Empty lines ignored before a request line (RFC 9112 §2.2); one more is a 400.
  static constexpr std::size_t kMaxLeadingEmptyLines = 8;

  /// Owns room for limits.max_fields fields (one allocation, here; may throw bad_alloc).
  /// Limits outside what the parser can hold (max_fields > kMaxFields, zero sizes) are clamped.
  explicit RequestParser(Limits limits = {});
  /// Keeps the fields in `storage`, which the caller owns and keeps alive as long as the
  /// parser and its requests; max_fields is clamped to storage.size(). Allocates nothing.
  RequestParser(Limits limits, std::span<Field> storage) noexcept;
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

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
  /// Keeps the fields in `storage` from the next parse() on (between requests, as reset() is:
  /// the server lends a connection its working memory per request). max_fields is unchanged;
  /// storage must hold that many.
  void use_fields(std::span<Field> storage) noexcept { fields_ = storage; }

 private:
  // Where scan_request_line() is in the request line.
  enum class LineState : std::uint8_t { empty_lines, empty_cr, method, target, version, cr, lf };

  Status fail(int status) noexcept;
  Status scan_request_line(std::string_view all) noexcept;
  Status parse_request_line(std::string_view line) noexcept;
  Status split_target() noexcept;
  Status parse_head(std::string_view head) noexcept;

  Limits limits_;
  Request request_;
  std::unique_ptr<Field[]> owned_;  // the first constructor's storage
  std::span<Field> fields_;
  std::size_t scanned_ = 0;   // bytes already looked at
  std::size_t start_ = 0;     // where the request line starts, after ignored empty lines
  std::size_t line_end_ = 0;  // end of the request line once found (its '\n' + 1), else 0
  std::size_t empty_lines_ = 0;
  std::size_t version_at_ = 0;  // bytes of "HTTP/d.d" seen
  LineState line_state_ = LineState::empty_lines;
  std::size_t head_size_ = 0;
  int error_ = 0;
};

/// ChunkedDecoder: the chunked transfer coding of a request body (RFC 9112 §7.1), decoded
/// incrementally into a buffer the caller owns. Every byte is looked at once, in order, so the
/// outcome does not depend on how the input is split; decode() consumes all it is given up to
/// the end of the body, and keeps no pointer into it. Strict and bounded: chunk sizes are hex
/// digits, a size line's extension (ignored) is at most kMaxExtension bytes, trailer fields
/// (checked as "token: value" lines, then ignored) at most max_trailers bytes in all, CRLF
/// line ends only; a body larger than the buffer is a 413, trailers beyond their bound a 431,
/// anything else malformed a 400.
class ChunkedDecoder {
 public:
  enum class Status { complete, incomplete, error };
  static constexpr std::size_t kMaxExtension = 1024;

  /// Starts a body, to be decoded into `out` (which the caller keeps alive until complete).
  void reset(std::span<char> out, std::size_t max_trailers) noexcept;
  /// Decodes from the start of `in`; `consumed` says how many bytes were used (all of them
  /// unless complete, when the rest belongs to what follows the body).
  Status decode(std::span<const char> in, std::size_t& consumed) noexcept;
  std::size_t size() const noexcept { return size_; }  // body bytes so far
  int error_status() const noexcept { return error_; }

 private:
  enum class State : std::uint8_t {
    size_first,  // the first hex digit of a chunk size
    size,        // more hex digits, or what ends them
    space,       // whitespace after the size: then ';' or CR
    extension,   // after ';', up to CR
    size_lf,
    data,
    data_cr,
    data_lf,
    trailer_start,  // a trailer field's first byte, or the CR of the final empty line
    trailer_name,
    trailer_value,
    trailer_lf,
    final_lf,
    done
  };
  Status fail(int status) noexcept;

  std::span<char> out_;
  std::size_t max_trailers_ = 0;
  std::size_t size_ = 0;
  std::uint64_t chunk_ = 0;  // bytes of the current chunk's data still to come
  std::size_t extension_ = 0, trailers_ = 0;
  bool in_name_ = false;  // a trailer field's name has begun
  State state_ = State::size_first;
  int error_ = 0;
};

/// The reason phrase of a status code this module produces ("OK", "Not Found", …).
std::string_view reason_phrase(int status) noexcept;

}  // namespace arbor::http
