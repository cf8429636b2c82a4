// Verified uploads: random bodies POSTed to /echo and compared byte for byte with what comes
// back, over a keep-alive connection. Sizes cover both of the server's body paths (in the
// connection's input buffer; in a shared body buffer) and both framings (Content-Length;
// chunked, always a body buffer), so a body buffer reused dirty, lent twice or returned early
// shows as a wrong byte here.
#include <random>
#include <string>

#include "load.hpp"

namespace arbor::soak {
namespace {

// The largest body the server takes by default (--max-body), and the input buffer a body must
// outgrow to take a shared body buffer (--max-head + 1 KiB: 17 KiB by default).
constexpr std::size_t kMaxBody = 1 << 20;
constexpr std::size_t kInputBuffer = 17 * 1024;

std::string chunked(const std::string& body, std::mt19937& rng) {
  std::string out;
  char size[32];
  for (std::size_t at = 0; at < body.size();) {
    const std::size_t n = std::min<std::size_t>(body.size() - at, 1 + rng() % 65536);
    std::snprintf(size, sizeof size, "%zx\r\n", n);
    out.append(size).append(body, at, n).append("\r\n");
    at += n;
  }
  return out + "0\r\n\r\n";
}

}  // namespace

void uploads(Context& ctx, int index) {
  constexpr const char* kName = "uploads";
  constexpr int kUploadsPerConnection = 500;
  std::mt19937 rng(static_cast<unsigned>(2000 + index));
  std::string body;
  while (!ctx.stopping()) {
    auto c = connect(ctx, kName, "127.0.0.2");
    if (!c) {
      ctx.nap(Millis(100));
      continue;
    }
    for (int i = 0; i < kUploadsPerConnection && !ctx.stopping(); ++i) {
      // 35%: fits the input buffer; 40%: a body buffer by Content-Length; 25%: chunked.
      const auto pick = rng() % 100;
      const bool is_chunked = pick >= 75;
      const std::size_t size = pick < 35   ? rng() % (kInputBuffer - 1024)
                               : pick < 75 ? kInputBuffer + 1 + rng() % (kMaxBody - kInputBuffer)
                                           : rng() % (kMaxBody / 2);
      body.resize(size);
      for (char& b : body)
        b = static_cast<char>(rng());
      std::string request = "POST /echo HTTP/1.1\r\nHost: soak\r\n";
      if (is_chunked)
        request += "Transfer-Encoding: chunked\r\n\r\n" + chunked(body, rng);
      else
        request += "Content-Length: " + std::to_string(size) + "\r\n\r\n" + body;
      if (!c->send(request)) {
        ctx.errors.fail(kName, std::string("send failed: ") + std::strerror(errno));
        break;
      }
      const Response r = c->read_response();
      const std::string what = std::string(is_chunked ? "chunked" : "Content-Length") +
                               " upload of " + std::to_string(size) + " bytes: ";
      if (r.status != 200) {
        ctx.errors.fail(kName, what + (r.status == 0 ? std::string("connection ended first")
                                                     : "status " + std::to_string(r.status)));
        break;
      }
      if (r.body != body) {
        std::size_t at = 0;
        while (at < r.body.size() && at < body.size() && r.body[at] == body[at])
          ++at;
        ctx.errors.fail(kName, what + "echo of " + std::to_string(r.body.size()) +
                                   " bytes differs at byte " + std::to_string(at));
        break;
      }
      ctx.counters.add(ctx.counters.requests);
      ctx.counters.add(ctx.counters.uploads);
      ctx.counters.add(ctx.counters.upload_bytes, size);
    }
  }
}

}  // namespace arbor::soak
