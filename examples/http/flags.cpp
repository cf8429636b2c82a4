#include "flags.hpp"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <string_view>

#if ARBOR_EXAMPLE_TLS
#include "arbor/tls/context.hpp"
#endif

namespace arbor::example {
namespace {

template <class T>
bool number(std::string_view text, T& out, T lo, T hi) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

// Empty if `path` can be opened for reading, else why not (errno's text).
std::string unreadable(const std::string& path) {
  std::ifstream in(path);
  if (in) return {};
  return std::strerror(errno);
}

// The HTTPS context from --tls-cert and --tls-key, or an error message.
std::string load_tls(const std::string& cert, const std::string& key, http::ServerOptions& out) {
  if (cert.empty() != key.empty())
    return std::string("--tls-cert and --tls-key go together: give both, or neither");
  if (cert.empty()) return {};
  for (const auto& [flag, path] : {std::pair{"--tls-cert", &cert}, std::pair{"--tls-key", &key}})
    if (auto why = unreadable(*path); !why.empty())
      return "cannot read " + std::string(flag) + " '" + *path + "': " + why;
#if ARBOR_EXAMPLE_TLS
  auto context = tls::Context::server();
  if (!context) return "cannot make a TLS context: " + context.error().message();
  if (auto r = context->use_certificate_chain_file(cert); !r)
    return "invalid --tls-cert '" + cert +
           "' (a PEM certificate chain, leaf first): " + r.error().message();
  if (auto r = context->use_private_key_file(key); !r)
    return "invalid --tls-key '" + key +
           "' (a PEM private key matching --tls-cert): " + r.error().message();
  if (auto r = context->set_alpn({"http/1.1"}); !r)
    return "cannot set ALPN: " + r.error().message();
  out.tls = std::make_shared<const tls::Context>(std::move(*context));
  return {};
#else
  (void)out;
  return std::string("--tls-cert: this build has no TLS (OpenSSL 3 was not found)");
#endif
}

}  // namespace

const char* usage() noexcept {
  return R"(usage: http_server [flags]

Serves GET /plaintext, GET /json, GET /metrics (Prometheus text) and POST /echo (the
request body back) over HTTP/1.1.

  --listen HOST:PORT         address to listen on (default 127.0.0.1:8080; port 0 = any)
  --workers N                scheduler worker threads (default: one per CPU)
  --engine NAME              auto, or one this build has: uring, epoll (Linux), kqueue
                             (BSD, macOS; Linux over libkqueue), iocp (Windows) (default
                             auto: the first that works here; on Linux io_uring, else epoll)
  --io-mode MODE             who waits for IO: workers (idle workers take turns in the
                             kernel), pollers (dedicated poller threads), rings (io_uring only:
                             a ring per worker, each worker parked in its own) or auto
                             (default: the engine's own; rings for io_uring, workers for epoll)
  --pollers N                poller threads with --io-mode pollers (default 1)
  --max-connections N        at it, the longest-idle connection is closed for a new one; with
                             none idle, the new one is closed at once (default 10000)
  --header-timeout-ms MS     a request head must arrive within this (default 10000)
  --body-timeout-ms MS       a request body must arrive within this of its head (default 60000)
  --idle-timeout-ms MS       idle keep-alive connections close after this, and a body may
                             pause no longer than this between reads (default 60000)
  --write-timeout-ms MS      a reply write that makes no progress for this long (a client
                             that stopped reading) ends the connection (default 60000)
  --max-head BYTES           request line + headers (default 16384; larger: 431)
  --max-request-line BYTES   (default 8192; longer: 414)
  --max-headers N            header fields per request (default 100, at most 1000; more: 431)
  --max-body BYTES           largest request body (default 1048576; larger: 413)
  --body-buffers N           bodies too large for a connection's input buffer are read into
                             one of at most N shared buffers of --max-body bytes (default 64;
                             none free: 503)
  --body-buffers-per-peer N  of which one peer (an IP address) may hold at most N (default 0:
                             a eighth of --body-buffers, at least 1; at its share: 503)
  --tls-cert PATH            HTTPS: the certificate chain (PEM, leaf first); with --tls-key
  --tls-key PATH             HTTPS: its private key (PEM). Both given: every connection is
                             TLS (1.2 or 1.3, ALPN http/1.1), the handshake within
                             --header-timeout-ms; neither: plain HTTP (the default)
  --shutdown-timeout-ms MS   on SIGINT/SIGTERM/SIGQUIT, how long in-flight requests may take
                             (default 5000)
  --help                     this text

Signals: SIGINT, SIGTERM, SIGQUIT drain and exit 0; SIGHUP, SIGUSR1 are logged and ignored.

Environment: ARBOR_ENGINE, ARBOR_IO_MODE, ARBOR_WORKERS, ARBOR_POLLERS, ARBOR_LOG, ... (see
README).
)";
}

std::variant<Flags, std::string> parse_flags(const std::vector<std::string>& args) {
  Flags f;
  auto env = RuntimeOptions::from_env();
  if (!env) return std::string("invalid ARBOR_* environment: ") + env.error().message();
  f.runtime = *env;
  constexpr auto kMaxMs = std::int64_t{24} * 3600 * 1000;
  std::string tls_cert, tls_key;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--help" || flag == "-h") {
      f.help = true;
      return f;
    }
    if (flag.rfind("--", 0) != 0) return "unexpected argument '" + flag + "'";
    if (i + 1 >= args.size()) return "flag " + flag + " needs a value";
    const std::string& value = args[++i];
    const std::string bad = "invalid value '" + value + "' for " + flag;
    if (flag == "--listen") {
      auto a = Address::parse(value);
      if (!a) return bad + " (expected HOST:PORT, e.g. 127.0.0.1:8080 or [::1]:8080)";
      f.server.listen = *a;
    } else if (flag == "--workers") {
      int n = 0;
      if (!number(value, n, 1, 1024)) return bad + " (1..1024)";
      f.runtime.scheduler.workers = n;
    } else if (flag == "--engine") {
      io::EngineOptions probe;
      probe.kind = value;
      if (probe.validate()) {
        std::string names = "auto";
        for (const auto& n : io::Engine::names())
          names.append(", ").append(n);
        return bad + " (" + names + ")";
      }
      f.runtime.engine.kind = value;
    } else if (flag == "--io-mode") {
      auto mode = io::parse_io_mode(value);
      if (!mode) return bad + " (auto, workers, pollers or rings)";
      f.runtime.engine.io_mode = *mode;
    } else if (flag == "--pollers") {
      if (!number(value, f.runtime.engine.pollers, 1, 64)) return bad + " (1..64)";
    } else if (flag == "--max-connections") {
      if (!number<std::size_t>(value, f.server.max_connections, 1, 10'000'000))
        return bad + " (1..10000000)";
    } else if (flag == "--header-timeout-ms" || flag == "--body-timeout-ms" ||
               flag == "--idle-timeout-ms" || flag == "--write-timeout-ms" ||
               flag == "--shutdown-timeout-ms") {
      std::int64_t ms = 0;
      if (!number<std::int64_t>(value, ms, 1, kMaxMs)) return bad + " (1..86400000)";
      (flag == "--header-timeout-ms"  ? f.server.header_timeout
       : flag == "--body-timeout-ms"  ? f.server.body_timeout
       : flag == "--idle-timeout-ms"  ? f.server.idle_timeout
       : flag == "--write-timeout-ms" ? f.server.write_timeout
                                      : f.shutdown_timeout) = std::chrono::milliseconds(ms);
    } else if (flag == "--max-head") {
      if (!number<std::size_t>(value, f.server.limits.max_head, 256, 1 << 20))
        return bad + " (256..1048576)";
    } else if (flag == "--max-request-line") {
      if (!number<std::size_t>(value, f.server.limits.max_request_line, 64, 1 << 20))
        return bad + " (64..1048576)";
    } else if (flag == "--max-headers") {
      if (!number<std::size_t>(value, f.server.limits.max_fields, 1,
                               http::RequestParser::kMaxFields))
        return bad + " (1.." + std::to_string(http::RequestParser::kMaxFields) + ")";
    } else if (flag == "--max-body") {
      // Bodies are held whole (--body-buffers of this size), so the bound is a memory one.
      if (!number<std::uint64_t>(value, f.server.limits.max_body, 0, std::uint64_t{1} << 30))
        return bad + " (0..1073741824)";
    } else if (flag == "--body-buffers") {
      if (!number<std::size_t>(value, f.server.body_buffers, 0, 1 << 20))
        return bad + " (0..1048576)";
    } else if (flag == "--body-buffers-per-peer") {
      if (!number<std::size_t>(value, f.server.body_buffers_per_peer, 0, 1 << 20))
        return bad + " (0..1048576)";
    } else if (flag == "--tls-cert" || flag == "--tls-key") {
      if (value.empty()) return bad + " (a file's path)";
      (flag == "--tls-cert" ? tls_cert : tls_key) = value;
    } else {
      return "unknown flag " + flag + " (see --help)";
    }
  }
  if (f.server.limits.max_request_line > f.server.limits.max_head)
    return std::string("--max-request-line must not exceed --max-head");
  if (auto error = load_tls(tls_cert, tls_key, f.server); !error.empty()) return error;
  return f;
}

}  // namespace arbor::example
