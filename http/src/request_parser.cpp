#include "arbor/http/request_parser.hpp"

#include <algorithm>
#include <cstring>

namespace arbor::http {
namespace {

// tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" /
//         "~" / DIGIT / ALPHA
constexpr std::array<bool, 256> make_tchar() {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c)
    t[static_cast<std::size_t>(c)] = true;
  for (int c = 'a'; c <= 'z'; ++c)
    t[static_cast<std::size_t>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c)
    t[static_cast<std::size_t>(c)] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~"))
    t[static_cast<unsigned char>(c)] = true;
  return t;
}
constexpr std::array<bool, 256> kTchar = make_tchar();

bool is_token(std::string_view s) noexcept {
  if (s.empty()) return false;
  for (char c : s)
    if (!kTchar[static_cast<unsigned char>(c)]) return false;
  return true;
}

// field-value characters: VCHAR, obs-text, SP, HTAB.
bool is_field_value(std::string_view s) noexcept {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\t') || u == 0x7f) return false;
  }
  return true;
}

char lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// RFC 9112 §3.2 and RFC 3986 §3.2.2-3: Host = uri-host [ ":" port ], where uri-host is an
// IP-literal in brackets or a reg-name of unreserved, pct-encoded and sub-delims characters
// (an IPv4 address is one too), and port is digits. Anything else (a space, a slash, a tab,
// "<") is a Host an application would paste into URLs it builds: 400. An empty host is refused
// too (nginx does): every target this server routes has an authority.
bool is_host_char(char c) noexcept {
  const auto u = static_cast<unsigned char>(c);
  if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9')) return true;
  return std::string_view("-._~!$&'()*+,;=%").find(c) != std::string_view::npos;
}
bool is_hex(char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool is_valid_host(std::string_view v) noexcept {
  std::string_view host = v, port;
  if (!v.empty() && v.front() == '[') {
    const std::size_t close = v.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (char c : v.substr(1, close - 1))  // IPv6address or IPvFuture
      if (!is_host_char(c) && c != ':') return false;
    host = {};
    const std::string_view rest = v.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return false;
    if (!rest.empty()) port = rest.substr(1);
  } else {
    const std::size_t colon = v.find(':');
    if (colon != std::string_view::npos) {
      host = v.substr(0, colon);
      port = v.substr(colon + 1);
    }
    if (host.empty()) return false;
    for (std::size_t i = 0; i < host.size(); ++i) {
      if (!is_host_char(host[i])) return false;
      if (host[i] == '%' && (i + 2 >= host.size() || !is_hex(host[i + 1]) || !is_hex(host[i + 2])))
        return false;
    }
  }
  for (char c : port)
    if (c < '0' || c > '9') return false;
  return true;
}

// Calls fn(token) for each element of a comma-separated list, skipping empty elements.
template <class Fn>
void for_each_token(std::string_view list, Fn&& fn) {
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    fn(trim(list.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace

std::string_view Request::field(std::string_view name) const noexcept {
  for (const Field& f : fields)
    if (iequals(f.name, name)) return f.value;
  return {};
}

RequestParser::RequestParser(Limits limits) : RequestParser(limits, {}) {
  owned_ = std::make_unique<Field[]>(limits_.max_fields);
  fields_ = {owned_.get(), limits_.max_fields};
}

RequestParser::RequestParser(Limits limits, std::span<Field> storage) noexcept
    : limits_(limits), fields_(storage) {
  limits_.max_fields = std::clamp<std::size_t>(limits_.max_fields, 1, kMaxFields);
  if (!storage.empty()) limits_.max_fields = std::min(limits_.max_fields, storage.size());
  limits_.max_request_line = std::max<std::size_t>(limits_.max_request_line, 16);
  limits_.max_head = std::max(limits_.max_head, limits_.max_request_line);
}

void RequestParser::reset() noexcept {
  request_ = Request{};
  scanned_ = start_ = line_end_ = head_size_ = 0;
  empty_lines_ = version_at_ = 0;
  line_state_ = LineState::empty_lines;
  error_ = 0;
}

RequestParser::Status RequestParser::fail(int status) noexcept {
  error_ = status;
  return Status::error;
}

RequestParser::Status RequestParser::parse(std::span<const char> data) noexcept {
  if (error_ != 0) return Status::error;
  const std::string_view all(data.data(), data.size());
  // The request line first, byte by byte: it decides 414, and lets garbage be refused at its
  // first byte rather than once a line end, a whole head or a timeout has come.
  if (line_end_ == 0) {
    if (Status s = scan_request_line(all); s != Status::complete) return s;
    // CR LF ended it at line_end_ - 2, line_end_ - 1.
    if (Status s = parse_request_line(all.substr(start_, line_end_ - 2 - start_));
        s == Status::error)
      return s;
    scanned_ = line_end_;
  }
  // Then the end of the head: an empty line. Each line end is checked as it is first seen
  // (a bare LF fails at once rather than leaving the head "incomplete" forever), and the scan
  // resumes after the last one seen.
  std::size_t end = std::string_view::npos;
  for (std::size_t lf; (lf = all.find('\n', scanned_)) != std::string_view::npos;) {
    if (all[lf - 1] != '\r') return fail(400);  // lf > line_end_ - 1, the request line's LF
    scanned_ = lf + 1;
    if (all[lf - 2] == '\n') {  // "\n\r\n": an empty line
      end = lf - 3;
      break;
    }
  }
  // Ignored empty lines do not count towards the head (there are at most a few of them).
  if (end == std::string_view::npos) {
    if (all.size() - start_ > limits_.max_head) return fail(431);
    scanned_ = all.size();
    return Status::incomplete;
  }
  head_size_ = end + 4;
  if (head_size_ - start_ > limits_.max_head) return fail(431);
  return parse_head(all.substr(line_end_, end + 2 - line_end_));
}

// Runs the request-line state machine over the bytes not seen yet. complete: line_end_ is set.
// Every byte is looked at once, in order, so the outcome does not depend on how the bytes were
// split across calls.
RequestParser::Status RequestParser::scan_request_line(std::string_view all) noexcept {
  static constexpr std::string_view kHttp = "HTTP/d.d";
  for (; scanned_ < all.size(); ++scanned_) {
    const char c = all[scanned_];
    const auto u = static_cast<unsigned char>(c);
    // Bytes of the line itself (not its CRLF) beyond the limit: 414, known before it ends.
    if (scanned_ - start_ >= limits_.max_request_line && line_state_ != LineState::cr &&
        line_state_ != LineState::lf && line_state_ != LineState::empty_lines &&
        line_state_ != LineState::empty_cr)
      return fail(414);
    switch (line_state_) {
      case LineState::empty_lines:  // RFC 9112 §2.2: ignore (a few) empty lines first
        if (c == '\r') {
          line_state_ = LineState::empty_cr;
          continue;
        }
        if (c == '\n') {  // a bare LF, tolerated here only
          if (++empty_lines_ > kMaxLeadingEmptyLines) return fail(400);
          start_ = scanned_ + 1;
          continue;
        }
        line_state_ = LineState::method;
        [[fallthrough]];
      case LineState::method:
        if (c == ' ' && scanned_ > start_) {
          line_state_ = LineState::target;
          continue;
        }
        if (!kTchar[u]) return fail(400);
        continue;
      case LineState::empty_cr:
        if (c != '\n' || ++empty_lines_ > kMaxLeadingEmptyLines) return fail(400);
        start_ = scanned_ + 1;
        line_state_ = LineState::empty_lines;
        continue;
      case LineState::target:
        if (c == ' ' && all[scanned_ - 1] != ' ') {
          line_state_ = LineState::version;
          continue;
        }
        if (u <= 0x20 || u >= 0x7f) return fail(400);  // visible ASCII only; no obs-text
        continue;
      case LineState::version: {
        const char want = kHttp[version_at_];
        if (want == 'd' ? (c < '0' || c > '9') : c != want) return fail(400);
        if (++version_at_ == kHttp.size()) line_state_ = LineState::cr;
        continue;
      }
      case LineState::cr:
        if (c != '\r') return fail(400);  // a bare LF, a trailing space, more version
        line_state_ = LineState::lf;
        continue;
      case LineState::lf:
        if (c != '\n') return fail(400);
        line_end_ = ++scanned_;
        return Status::complete;
    }
  }
  return Status::incomplete;
}

// method SP request-target SP HTTP-version, already checked byte by byte.
RequestParser::Status RequestParser::parse_request_line(std::string_view line) noexcept {
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = line.find(' ', sp1 + 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) return fail(505);
  request_.method = line.substr(0, sp1);
  request_.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  request_.version_minor = version[7] - '0';
  request_.keep_alive = request_.version_minor == 1;
  return split_target();
}

// Path, query and (for absolute-form) host from the target. Only http and https are taken as
// absolute-form; any other target that does not start with '/' is passed through as the path.
RequestParser::Status RequestParser::split_target() noexcept {
  std::string_view rest = request_.target;
  bool absolute = false;
  for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")}) {
    if (rest.size() >= scheme.size() && iequals(rest.substr(0, scheme.size()), scheme)) {
      rest.remove_prefix(scheme.size());
      absolute = true;
      break;
    }
  }
  if (absolute) {
    const std::size_t authority_end = std::min(rest.find('/'), rest.find('?'));
    const std::string_view authority = rest.substr(0, authority_end);
    // RFC 9110 §4.2.1: an empty host is invalid; §4.2.4: userinfo is deprecated, refused here.
    if (authority.find('@') != std::string_view::npos || !is_valid_host(authority))
      return fail(400);
    request_.host = authority;
    rest.remove_prefix(authority.size());
  }
  if (rest.empty() || rest.front() != '/') {  // asterisk- or authority-form, or an empty path
    if (!absolute) {
      request_.path = rest;
      return Status::incomplete;
    }
    if (rest.empty() || rest.front() == '?') {
      request_.path = "/";  // RFC 9112 §3.2.2 (via §3.3): an empty path is "/"
      request_.query = rest.empty() ? rest : rest.substr(1);
      return Status::incomplete;
    }
  }
  const std::size_t question = rest.find('?');
  request_.path = rest.substr(0, question);
  if (question != std::string_view::npos) request_.query = rest.substr(question + 1);
  return Status::incomplete;
}

// Header fields, each "name: value" CRLF; `head` ends with the last field's CRLF (or is empty).
RequestParser::Status RequestParser::parse_head(std::string_view head) noexcept {
  std::size_t count = 0;
  bool has_length = false, has_host = false, has_transfer_encoding = false, chunked = false;
  bool close = false, keep_alive = false;
  while (!head.empty()) {
    const std::size_t lf = head.find('\n');
    // The head was found by its CRLFCRLF, so every line here ends in '\n'; a bare LF inside
    // is an error.
    if (lf == 0 || head[lf - 1] != '\r') return fail(400);
    const std::string_view line = head.substr(0, lf - 1);
    head.remove_prefix(lf + 1);
    if (line.empty() || line.front() == ' ' || line.front() == '\t') return fail(400);  // folding
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return fail(400);
    const std::string_view name = line.substr(0, colon);
    const std::string_view raw = line.substr(colon + 1);
    if (!is_token(name) || !is_field_value(raw)) return fail(400);
    if (count == limits_.max_fields || count == fields_.size()) return fail(431);
    const std::string_view value = trim(raw);
    fields_[count++] = {name, value};

    if (iequals(name, "content-length")) {
      // RFC 9110 §8.6: 1*DIGIT, so leading zeros are allowed; past them, 19 digits at most
      // keeps the value below 2^63 (and any limit).
      std::string_view digits = value;
      while (digits.size() > 1 && digits.front() == '0')
        digits.remove_prefix(1);
      if (value.empty() || digits.size() > 19) return fail(400);
      std::uint64_t n = 0;
      for (char c : digits) {
        if (c < '0' || c > '9') return fail(400);
        n = n * 10 + static_cast<std::uint64_t>(c - '0');
      }
      if (has_length && n != request_.content_length) return fail(400);
      has_length = true;
      request_.content_length = n;
    } else if (iequals(name, "transfer-encoding")) {
      // One field, one coding: "chunked". A second field or a list is a coding beyond it.
      chunked = !has_transfer_encoding && iequals(value, "chunked");
      has_transfer_encoding = true;
    } else if (iequals(name, "host")) {
      if (has_host || !is_valid_host(value)) return fail(400);
      has_host = true;
      if (request_.host.empty()) request_.host = value;  // an absolute-form target's wins
    } else if (iequals(name, "connection")) {
      for_each_token(value, [&](std::string_view t) {
        if (iequals(t, "close")) close = true;
        if (iequals(t, "keep-alive")) keep_alive = true;
      });
    }
  }
  if (has_transfer_encoding && has_length) return fail(400);
  if (has_transfer_encoding) {
    // RFC 9112 §6.1: in HTTP/1.0 the framing is faulty. Of the codings only chunked, alone,
    // is understood (a server MUST understand it); others (gzip, …) get 501.
    if (request_.version_minor == 0) return fail(400);
    if (!chunked) return fail(501);
    request_.chunked = true;
  }
  if (request_.version_minor == 1 && !has_host) return fail(400);
  if (request_.content_length > limits_.max_body) return fail(413);
  if (close)
    request_.keep_alive = false;
  else if (keep_alive)
    request_.keep_alive = true;
  request_.fields = {fields_.data(), count};
  return Status::complete;
}

void ChunkedDecoder::reset(std::span<char> out, std::size_t max_trailers) noexcept {
  out_ = out;
  max_trailers_ = max_trailers;
  size_ = extension_ = trailers_ = 0;
  chunk_ = 0;
  in_name_ = false;
  state_ = State::size_first;
  error_ = 0;
}

ChunkedDecoder::Status ChunkedDecoder::fail(int status) noexcept {
  error_ = status;
  return Status::error;
}

ChunkedDecoder::Status ChunkedDecoder::decode(std::span<const char> in,
                                              std::size_t& consumed) noexcept {
  consumed = 0;
  if (error_ != 0) return Status::error;
  std::size_t i = 0;
  while (i < in.size() && state_ != State::done) {
    const char c = in[i];
    const auto u = static_cast<unsigned char>(c);
    if (state_ == State::data) {  // the bulk: copied, not looked at byte by byte
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_, in.size() - i));
      std::memcpy(out_.data() + size_, in.data() + i, n);
      size_ += n;
      chunk_ -= n;
      i += n;
      if (chunk_ == 0) state_ = State::data_cr;
      continue;
    }
    ++i;
    const bool ctl = (u < 0x20 && c != '\t') || u == 0x7f;
    switch (state_) {
      case State::size_first:
      case State::size: {
        const int digit = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
        if (digit >= 0) {
          // Beyond the room left: 413 at once, before any overflow (the room is < 2^60).
          chunk_ = chunk_ * 16 + static_cast<std::uint64_t>(digit);
          if (chunk_ > out_.size() - size_) return fail(413);
          state_ = State::size;
          continue;
        }
        if (state_ == State::size_first) return fail(400);
        [[fallthrough]];
      }
      case State::space:
        // RFC 9112 §7.1: chunk-size [ chunk-ext ] CRLF, whitespace (BWS) only before a ';'.
        if (c == ' ' || c == '\t') {
          state_ = State::space;
        } else if (c == ';') {
          state_ = State::extension;
        } else if (c == '\r' && state_ == State::size) {
          state_ = State::size_lf;
        } else {
          return fail(400);
        }
        continue;
      case State::extension:  // ignored, but bounded and free of control characters
        if (c == '\r') {
          state_ = State::size_lf;
        } else if (ctl || ++extension_ > kMaxExtension) {
          return fail(400);
        }
        continue;
      case State::size_lf:
        if (c != '\n') return fail(400);
        extension_ = 0;
        state_ = chunk_ == 0 ? State::trailer_start : State::data;
        continue;
      case State::data_cr:
        if (c != '\r') return fail(400);
        state_ = State::data_lf;
        continue;
      case State::data_lf:
        if (c != '\n') return fail(400);
        state_ = State::size_first;
        continue;
      case State::trailer_start:
        if (c == '\r') {
          state_ = State::final_lf;
          continue;
        }
        state_ = State::trailer_name;
        [[fallthrough]];
      case State::trailer_name:
        if (++trailers_ > max_trailers_) return fail(431);
        if (c == ':' && in_name_) {
          state_ = State::trailer_value;
        } else if (!kTchar[u]) {
          return fail(400);
        }
        in_name_ = true;
        continue;
      case State::trailer_value:
        if (++trailers_ > max_trailers_) return fail(431);
        if (c == '\r') {
          state_ = State::trailer_lf;
        } else if (ctl) {
          return fail(400);
        }
        continue;
      case State::trailer_lf:
        if (c != '\n') return fail(400);
        in_name_ = false;
        state_ = State::trailer_start;
        continue;
      case State::final_lf:
        if (c != '\n') return fail(400);
        state_ = State::done;
        continue;
      case State::data:
      case State::done:
        break;
    }
  }
  consumed = i;
  return state_ == State::done ? Status::complete : Status::incomplete;
}

std::string_view reason_phrase(int status) noexcept {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

}  // namespace arbor::http
