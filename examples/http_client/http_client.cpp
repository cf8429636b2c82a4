// An HTTP/1.1 client: fetches each URL and writes the bodies to stdout, one after the other.
//
//   http_client [--timeout SECONDS] [--include] [--data TEXT] URL...
//
//   URL             http://host[:port][/path]  (a name, an IPv4 address or [an IPv6 one])
//   --timeout S     each request's limit, from connecting to the body's end (default 30)
//   --include       the status line and the header fields before each body
//   --data TEXT     POST TEXT (Content-Length framed) instead of GET
//
// Exit status: 0 if every response came with a status below 400, 4 if some did not, 1 if a
// request failed (no connection, a timeout, a malformed response: the reason on stderr), 2 for
// bad arguments.
//
// What it shows of arbor: TcpStream::connect(rt, host, port) resolves the name and tries its
// addresses; a BufferedReader frames the response (read_line with a maximum for the status
// line and the fields, read_some/read_exact for the body: Content-Length, chunked with
// extensions and trailers, or up to the end of the stream); with_timeout bounds the whole
// request. Consecutive URLs to the same host and port share one keep-alive connection, unless
// the server closes it (Connection: close, HTTP/1.0).
//
// Strict where a confused client would be unsafe: conflicting Content-Length values,
// Transfer-Encoding with anything but a final "chunked", a chunk size that is not hex or too
// large, a status line or a field without the shape RFC 9112 gives them are all errors.
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "arbor/arbor.hpp"

#if defined(_WIN32)
#include <fcntl.h>
#include <io.h>
#endif

namespace {

using namespace std::chrono_literals;
constexpr std::size_t kMaxLine = 8 * 1024;  // a status line, a field, a chunk-size line
constexpr std::size_t kMaxFields = 100;

struct Url {
  std::string host;  // without brackets
  std::uint16_t port = 80;
  std::string authority;  // as written: the Host field
  std::string target;     // path and query, "/" if none
};

std::optional<Url> parse_url(std::string_view text) {
  constexpr std::string_view kScheme = "http://";
  if (text.substr(0, kScheme.size()) != kScheme) return std::nullopt;
  text.remove_prefix(kScheme.size());
  // Its bytes go into the request line and the Host field as they are: a space, CR, LF or other
  // control byte would break the request's shape or add fields of the URL's own.
  for (const char ch : text)
    if (static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7f) return std::nullopt;
  const auto slash = text.find_first_of("/?");
  Url url;
  url.authority = std::string(text.substr(0, slash));
  url.target = slash == std::string_view::npos ? "/" : std::string(text.substr(slash));
  if (url.target[0] == '?') url.target.insert(0, "/");
  std::string_view authority = url.authority;
  std::string_view port;
  if (authority.starts_with('[')) {  // [v6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    url.host = std::string(authority.substr(1, close - 1));
    const auto rest = authority.substr(close + 1);
    if (!rest.empty() && (rest[0] != ':' || rest.size() == 1)) return std::nullopt;
    if (!rest.empty()) port = rest.substr(1);
  } else {
    const auto colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (url.host.empty() || url.authority.find('@') != std::string::npos) return std::nullopt;
  if (!port.empty()) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
      return std::nullopt;
    url.port = static_cast<std::uint16_t>(value);
  }
  return url;
}

// A failed request: what to print.
struct Failure {
  std::string reason;
};
template <class T>
using Outcome = std::variant<T, Failure>;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}
template <class N>
bool parse_number(std::string_view text, N& out, int base = 10) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// One connection and the reader over it; pinned (the reader points at the stream).
struct Connection {
  explicit Connection(arbor::TcpStream s) : stream(std::move(s)) {}
  arbor::TcpStream stream;
  arbor::BufferedReader<arbor::TcpStream> reader{stream, 16 * 1024};
  std::string key;  // host:port it is connected to
};

// What the head of a response says about its body and the connection.
struct Head {
  int status = 0;
  bool keep_alive = true;
  bool chunked = false;
  std::optional<std::uint64_t> content_length;
};

struct Options {
  std::chrono::seconds timeout{30};
  bool include = false;
  std::optional<std::string> data;
  std::vector<Url> urls;
};

std::string describe(std::error_code error) {
  if (error == arbor::Errc::frame_too_long) return "a response line is too long";
  if (error == arbor::Errc::end_of_stream || error == arbor::Errc::incomplete_frame)
    return "the server closed the connection in the middle of the response";
  return error.message();
}

void out(std::string_view bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
}

// The status line and the fields (interim 1xx responses skipped).
arbor::Task<Outcome<Head>> read_head(Connection& c, bool head_request, bool include) {
  for (;;) {
    auto status_line = co_await c.reader.read_line(kMaxLine);
    if (!status_line) co_return Failure{describe(status_line.error())};
    // HTTP/1.x SSS[ reason]
    const std::string_view line = *status_line;
    Head head;
    if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || (line[7] != '0' && line[7] != '1') ||
        line[8] != ' ' || !parse_number(line.substr(9, 3), head.status) || head.status < 100 ||
        (line.size() > 12 && line[12] != ' '))
      co_return Failure{"malformed status line: \"" + std::string(line.substr(0, 80)) + "\""};
    head.keep_alive = line[7] == '1';
    const bool http10 = line[7] == '0';  // `line` views the reader's buffer: not kept past here
    if (include) {
      out(line);
      out("\n");
    }
    for (std::size_t fields = 0;; ++fields) {
      auto field_line = co_await c.reader.read_line(kMaxLine);
      if (!field_line) co_return Failure{describe(field_line.error())};
      const std::string_view field = *field_line;
      if (field.empty()) break;
      if (fields == kMaxFields) co_return Failure{"more than 100 header fields"};
      if (include) {
        out(field);
        out("\n");
      }
      const auto colon = field.find(':');
      if (colon == 0 || colon == std::string_view::npos || field.find_first_of(" \t") < colon)
        co_return Failure{"malformed header field: \"" + std::string(field.substr(0, 80)) + "\""};
      const auto name = field.substr(0, colon);
      const auto value = trim(field.substr(colon + 1));
      if (iequals(name, "content-length")) {
        std::uint64_t length = 0;
        if (!parse_number(value, length)) co_return Failure{"malformed Content-Length"};
        if (head.content_length && *head.content_length != length)
          co_return Failure{"conflicting Content-Length fields"};
        head.content_length = length;
      } else if (iequals(name, "transfer-encoding")) {
        const auto last = trim(value.substr(value.rfind(',') + 1));
        if (!iequals(last, "chunked"))
          co_return Failure{"unsupported Transfer-Encoding: " + std::string(value)};
        head.chunked = true;
      } else if (iequals(name, "connection")) {
        if (iequals(value, "close")) head.keep_alive = false;
        if (iequals(value, "keep-alive")) head.keep_alive = true;
      }
    }
    if (head.status >= 200 || head.status == 101) {
      // RFC 9112 §6.1: chunked wins; and since a response with both may be an attempt at
      // response splitting, its connection is not used again.
      if (head.chunked && head.content_length) {
        head.content_length.reset();
        head.keep_alive = false;
      }
      // §6.1 again: an HTTP/1.0 message with Transfer-Encoding has faulty framing (a 1.0 hop
      // may have framed it otherwise), so it is read as chunked and the connection then closed.
      if (head.chunked && http10) head.keep_alive = false;
      if (head_request || head.status == 204 || head.status == 304) {
        head.chunked = false;
        head.content_length = 0;
      }
      if (include) out("\n");
      co_return head;
    }
    if (include) out("\n");  // an interim response: the final one follows
  }
}

// Copies exactly `n` body bytes to stdout.
arbor::Task<std::optional<Failure>> copy_body(Connection& c, std::uint64_t n) {
  std::byte buffer[16 * 1024];
  while (n > 0) {
    auto got =
        co_await c.reader.read_some(std::span(buffer, std::min<std::uint64_t>(n, sizeof buffer)));
    if (!got) co_return Failure{describe(got.error())};
    if (*got == 0) co_return Failure{describe(arbor::Errc::end_of_stream)};
    out({reinterpret_cast<const char*>(buffer), *got});
    n -= *got;
  }
  co_return std::nullopt;
}

arbor::Task<std::optional<Failure>> read_body(Connection& c, const Head& head) {
  if (head.content_length) co_return co_await copy_body(c, *head.content_length);
  if (!head.chunked) {  // delimited by the end of the stream
    std::byte buffer[16 * 1024];
    for (;;) {
      auto got = co_await c.reader.read_some(buffer);
      if (!got) co_return Failure{describe(got.error())};
      if (*got == 0) co_return std::nullopt;
      out({reinterpret_cast<const char*>(buffer), *got});
    }
  }
  for (;;) {  // chunk-size [; extensions] CRLF, data CRLF, ..., 0 CRLF, trailers, CRLF
    auto size_line = co_await c.reader.read_line(kMaxLine);
    if (!size_line) co_return Failure{describe(size_line.error())};
    const std::string_view hex = size_line->substr(0, size_line->find(';'));
    std::uint64_t size = 0;
    if (!parse_number(hex, size, 16) || size > (std::uint64_t{1} << 40))
      co_return Failure{"malformed chunk size: \"" + std::string(hex.substr(0, 40)) + "\""};
    if (size == 0) break;
    if (auto failure = co_await copy_body(c, size)) co_return failure;
    auto end = co_await c.reader.read_line(2);
    if (!end || !end->empty()) co_return Failure{"a chunk does not end with CRLF"};
  }
  for (;;) {  // trailer fields, ignored
    auto trailer = co_await c.reader.read_line(kMaxLine);
    if (!trailer) co_return Failure{describe(trailer.error())};
    if (trailer->empty()) co_return std::nullopt;
  }
}

// One request on `c` (connecting first if it is not open): the status, or why not.
arbor::Task<Outcome<Head>> fetch(arbor::Runtime& rt, std::unique_ptr<Connection>& c, const Url& url,
                                 const Options& options) {
  const std::string key = url.host + ":" + std::to_string(url.port);
  if (!c || c->key != key) {
    c.reset();
    // The name is resolved (numeric hosts are not) and its addresses tried Happy Eyeballs
    // style; `target` outlives the task that reads it (a string_view parameter).
    const std::string target =
        (url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host) + ":" +
        std::to_string(url.port);
    auto stream = co_await arbor::TcpStream::connect(rt, target);
    if (!stream) co_return Failure{"cannot connect to " + key + ": " + stream.error().message()};
    c = std::make_unique<Connection>(std::move(*stream));
    c->key = key;
  }
  std::string request = (options.data ? "POST " : "GET ") + url.target +
                        " HTTP/1.1\r\nHost: " + url.authority +
                        "\r\nUser-Agent: arbor-http-client\r\nAccept: */*\r\n";
  if (options.data)
    request += "Content-Type: application/octet-stream\r\nContent-Length: " +
               std::to_string(options.data->size()) + "\r\n\r\n" + *options.data;
  else
    request += "\r\n";
  if (auto sent = co_await c->stream.write_all(std::as_bytes(std::span(request))); !sent)
    co_return Failure{"cannot send the request: " + sent.error().message()};
  auto head = co_await read_head(*c, false, options.include);
  if (auto* h = std::get_if<Head>(&head)) {
    // Not `if (auto failure = co_await ...) co_return *failure;`: clang 14 at -O1 lost the
    // failure in that form (HttpClientExample.AMalformedResponseIsAClearError, asan preset).
    auto failure = co_await read_body(*c, *h);
    if (failure) co_return *failure;
    if (!h->keep_alive || (!h->content_length && !h->chunked)) c.reset();
  }
  co_return head;
}

arbor::Task<int> run(arbor::Runtime& rt, const Options& options) {
  std::unique_ptr<Connection> connection;
  int status = 0;
  for (const Url& url : options.urls) {
    auto result =
        co_await arbor::with_timeout(options.timeout, fetch(rt, connection, url, options));
    std::fflush(stdout);
    if (!result) {
      std::fprintf(
          stderr, "http_client: http://%s%s: %s\n", url.authority.c_str(), url.target.c_str(),
          result.error() == std::errc::timed_out ? "timed out" : result.error().message().c_str());
      co_return 1;
    }
    if (auto* failure = std::get_if<Failure>(&*result)) {
      std::fprintf(stderr, "http_client: http://%s%s: %s\n", url.authority.c_str(),
                   url.target.c_str(), failure->reason.c_str());
      co_return 1;
    }
    if (std::get<Head>(*result).status >= 400) status = 4;
  }
  co_return status;
}

std::optional<Options> parse_arguments(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--timeout" && has_value) {
      long long seconds = 0;
      if (!parse_number(std::string_view(argv[++i]), seconds) || seconds <= 0 || seconds > 86'400)
        return std::nullopt;
      options.timeout = std::chrono::seconds(seconds);
    } else if (arg == "--include") {
      options.include = true;
    } else if (arg == "--data" && has_value) {
      options.data = argv[++i];
    } else if (auto url = parse_url(arg)) {
      options.urls.push_back(std::move(*url));
    } else {
      return std::nullopt;
    }
  }
  if (options.urls.empty()) return std::nullopt;
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = parse_arguments(argc, argv);
  if (!options) {
    std::fprintf(stderr,
                 "usage: http_client [--timeout SECONDS] [--include] [--data TEXT] URL...\n"
                 "  URL: http://host[:port][/path]   (0 < SECONDS <= 86400)\n");
    return 2;
  }
#if defined(_WIN32)
  _setmode(_fileno(stdout), _O_BINARY);  // bodies byte for byte: no "\n" made "\r\n"
#endif
  arbor::Runtime rt;
  return rt.block_on(run(rt, *options));
}
