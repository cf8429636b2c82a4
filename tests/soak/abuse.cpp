// The misbehaving load: slowloris heads and bursts of connections reset at awkward moments.
// What these clients suffer (a cut, their own reset) is expected and only counted; what must
// hold is that the server cuts the slow ones in time and answers the plain requests among the
// bursts, while the other components see nothing of it.
#include <fcntl.h>
#include <poll.h>

#include <string>
#include <vector>

#include "load.hpp"

namespace arbor::soak {

void slowloris(Context& ctx) {
  constexpr const char* kName = "slowloris";
  // A head that never ends: a header field whose value grows a byte at a time.
  const std::string prefix = "GET /plaintext HTTP/1.1\r\nHost: soak\r\nX-Slow: ";
  const auto bound = ctx.timeouts.header + ctx.timeouts.header / 4 + Millis(3000);
  struct Slot {
    std::unique_ptr<Client> client;
    std::size_t sent = 0;
    Clock::time_point start;
  };
  std::vector<Slot> slots(static_cast<std::size_t>(ctx.shape.slowloris));
  std::vector<pollfd> fds;
  while (!ctx.stopping()) {
    fds.clear();
    for (Slot& s : slots) {
      if (!s.client) {
        s.client = connect(ctx, kName);
        if (!s.client) continue;
        ::fcntl(s.client->fd(), F_SETFL, ::fcntl(s.client->fd(), F_GETFL) | O_NONBLOCK);
        s.sent = 0;
        s.start = Clock::now();
      }
      if (Clock::now() - s.start > bound) {
        ctx.errors.fail(kName, "a trickled head was not cut within " +
                                   std::to_string(bound.count()) + " ms (header timeout " +
                                   std::to_string(ctx.timeouts.header.count()) + " ms)");
        s.client.reset();
        continue;
      }
      const char byte = s.sent < prefix.size() ? prefix[s.sent] : 'a';
      const long n = ::send(s.client->fd(), &byte, 1, MSG_NOSIGNAL);
      if (n == 1) ++s.sent;
      // A failed send (EPIPE, ECONNRESET) is the cut showing itself; the read below sees it.
      fds.push_back({s.client->fd(), POLLIN, 0});
    }
    // One byte per connection per 100 ms; readable in between means the server cut it (it may
    // send nothing first, or a status line: either way the connection ends).
    const auto tick_end = Clock::now() + Millis(100);
    while (!ctx.stopping() && Clock::now() < tick_end) {
      const auto left = std::chrono::duration_cast<Millis>(tick_end - Clock::now());
      if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) continue;
      for (pollfd& p : fds) {
        if (p.revents == 0 || p.fd < 0) continue;
        char drain[512];
        const long n = ::recv(p.fd, drain, sizeof drain, 0);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;
        // EOF or an error (a reset): cut.
        for (Slot& s : slots)
          if (s.client && s.client->fd() == p.fd) {
            ctx.counters.add(ctx.counters.slowloris_cuts);
            s.client.reset();
          }
        p.fd = -1;  // poll ignores negative descriptors
      }
    }
  }
}

void bursts(Context& ctx) {
  constexpr const char* kName = "bursts";
  const std::string get_json = "GET /json HTTP/1.1\r\nHost: soak\r\n\r\n";
  const std::string get_plain = "GET /plaintext HTTP/1.1\r\nHost: soak\r\n\r\n";
  const std::string get_close =
      "GET /plaintext HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n";
  std::string pipelined;  // 256 requests: their replies outgrow what one read of them takes
  for (int i = 0; i < 256; ++i)
    pipelined += get_json;
  // A body above the input buffer (so it takes a shared body buffer), 64 KiB of it sent.
  const std::string upload_head =
      "POST /echo HTTP/1.1\r\nHost: soak\r\nContent-Length: 262144\r\n\r\n";
  const std::string upload_part(65536, 'u');

  enum Kind { kGet, kGetJson, kGetClose, kResetMidRequest, kResetMidResponse, kResetMidUpload };
  while (ctx.nap(Millis(1000))) {
    std::vector<std::unique_ptr<Client>> clients;
    for (int i = 0; i < ctx.shape.burst; ++i)
      clients.push_back(connect(ctx, kName));  // all open before any request is sent
    for (std::size_t i = 0; i < clients.size(); ++i) {
      if (!clients[i]) continue;
      Client& c = *clients[i];
      bool sent = true;
      switch (static_cast<Kind>(i % 6)) {
        case kGet:
          sent = c.send(get_plain);
          break;
        case kGetJson:
          sent = c.send(get_json);
          break;
        case kGetClose:
          sent = c.send(get_close);
          break;
        case kResetMidRequest:
          sent = c.send(get_plain.substr(0, 20));
          break;
        case kResetMidResponse:
          sent = c.send(pipelined);
          break;
        case kResetMidUpload:
          sent = c.send(upload_head) && c.send(upload_part);
          break;
      }
      if (!sent) {
        ctx.errors.fail(kName, std::string("send failed: ") + std::strerror(errno));
        clients[i].reset();
      }
    }
    for (std::size_t i = 0; i < clients.size(); ++i) {
      if (!clients[i]) continue;
      Client& c = *clients[i];
      const Kind kind = static_cast<Kind>(i % 6);
      if (kind == kGet || kind == kGetJson || kind == kGetClose) {
        const Response r = c.read_response();
        const char* want = kind == kGetJson ? kJsonBody : kPlaintextBody;
        if (r.status == 200 && r.body == want)
          ctx.counters.add(ctx.counters.requests);
        else
          ctx.errors.fail(kName, r.status == 0 ? std::string("connection ended before a response")
                                               : "status " + std::to_string(r.status) + ", body '" +
                                                     r.body.substr(0, 64) + "'");
        continue;  // closed in order by the destructor
      }
      if (kind == kResetMidResponse) {
        // Wait for the replies to start, so the reset lands while the server is writing.
        char byte;
        long n;
        do {
          n = ::recv(c.fd(), &byte, 1, 0);
        } while (n < 0 && errno == EINTR);
        if (n != 1) ctx.errors.fail(kName, "no reply to 256 pipelined GETs before the reset");
      }
      c.reset_connection();
      ctx.counters.add(ctx.counters.resets);
    }
  }
}

}  // namespace arbor::soak
