// The well-behaved load: keep-alive GETs back to back and idle keep-alive connections. These
// clients do nothing wrong, so every response must be right and no connection may end under
// them except an idle one the server expires on purpose (load.hpp says which and when).
#include <poll.h>

#include <random>
#include <string>
#include <vector>

#include "load.hpp"

namespace arbor::soak {
namespace {

constexpr const char* kGetPlaintext = "GET /plaintext HTTP/1.1\r\nHost: soak\r\n\r\n";
constexpr const char* kGetJson = "GET /json HTTP/1.1\r\nHost: soak\r\n\r\n";

// Reads one response to the GET of `json` (or /plaintext) and checks it; false (and an error
// reported) if it is not 200 with the route's body.
bool verify_get(Context& ctx, const char* component, Client& c, bool json) {
  const Response r = c.read_response();
  const char* want = json ? kJsonBody : kPlaintextBody;
  if (r.status == 200 && r.body == want) {
    ctx.counters.add(ctx.counters.requests);
    return true;
  }
  if (r.status == 0)
    ctx.errors.fail(component, std::string("connection ended (EOF, reset or 10 s silence) before "
                                           "the response to GET ") +
                                   (json ? "/json" : "/plaintext"));
  else
    ctx.errors.fail(component, "GET " + std::string(json ? "/json" : "/plaintext") + ": status " +
                                   std::to_string(r.status) + ", body '" + r.body.substr(0, 64) +
                                   "'");
  return false;
}

}  // namespace

void keepalive_gets(Context& ctx, int index) {
  constexpr const char* kName = "keep-alive GETs";
  // A new connection every so many requests, so connection set-up and teardown run all along.
  constexpr int kRequestsPerConnection = 20000;
  std::mt19937 rng(static_cast<unsigned>(1000 + index));
  while (!ctx.stopping()) {
    auto c = connect(ctx, kName);
    if (!c) {
      ctx.nap(Millis(100));
      continue;
    }
    int sent = 0;
    bool ok = true;
    while (ok && sent < kRequestsPerConnection && !ctx.stopping()) {
      // One batch in four pipelined 16 deep (the responses to one read go out in one write).
      const int depth = rng() % 4 == 0 ? 16 : 1;
      std::vector<bool> json(static_cast<std::size_t>(depth));
      std::string batch;
      for (int i = 0; i < depth; ++i) {
        json[static_cast<std::size_t>(i)] = rng() % 2 == 0;
        batch += json[static_cast<std::size_t>(i)] ? kGetJson : kGetPlaintext;
      }
      if (!c->send(batch)) {
        ctx.errors.fail(kName, std::string("send failed: ") + std::strerror(errno));
        break;
      }
      for (int i = 0; i < depth && ok; ++i)
        ok = verify_get(ctx, kName, *c, json[static_cast<std::size_t>(i)]);
      sent += depth;
    }
  }
}

void idle_connections(Context& ctx) {
  constexpr const char* kName = "idle";
  struct Slot {
    std::unique_ptr<Client> client;
    bool expire = false;      // left idle until the server closes it
    Clock::time_point due;    // revisit: the next request; expire: the latest close allowed
    Clock::time_point since;  // expire: when it went idle
  };
  const auto revisit = ctx.timeouts.idle * 2 / 5;
  const auto expiry_bound = ctx.timeouts.idle + ctx.timeouts.idle / 4 + Millis(3000);

  // Connects the slot and sends its first request (false: the error is reported).
  auto open = [&](Slot& s) {
    s.client = connect(ctx, kName);
    if (!s.client) return false;
    if (!s.client->send(kGetPlaintext)) {
      ctx.errors.fail(kName, std::string("send failed: ") + std::strerror(errno));
      s.client.reset();
      return false;
    }
    if (!verify_get(ctx, kName, *s.client, false)) {
      s.client.reset();
      return false;
    }
    s.since = Clock::now();
    s.due = s.since + (s.expire ? expiry_bound : revisit);
    return true;
  };

  std::vector<Slot> slots(static_cast<std::size_t>(ctx.shape.idle));
  for (std::size_t i = 0; i < slots.size() && !ctx.stopping(); ++i) {
    slots[i].expire = i < static_cast<std::size_t>(ctx.shape.idle_expire);
    open(slots[i]);
  }
  // Spread the revisits over the interval, so they do not all fall in one instant.
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (slots[i].client && !slots[i].expire) slots[i].due -= revisit * i / slots.size();

  std::vector<pollfd> watched;
  std::vector<Slot*> watched_slot;
  while (!ctx.stopping()) {
    const auto now = Clock::now();
    watched.clear();
    watched_slot.clear();
    for (Slot& s : slots) {
      if (!s.client) {  // lost to an error earlier: try again
        open(s);
        continue;
      }
      if (s.expire) {
        if (now > s.due) {
          ctx.errors.fail(kName, "an idle connection was still open " +
                                     std::to_string(expiry_bound.count()) +
                                     " ms after its last response (idle timeout " +
                                     std::to_string(ctx.timeouts.idle.count()) + " ms)");
          s.client.reset();
          continue;
        }
        watched.push_back({s.client->fd(), POLLIN, 0});
        watched_slot.push_back(&s);
      } else if (now >= s.due) {
        if (!s.client->send(kGetPlaintext)) {
          ctx.errors.fail(
              kName, std::string("send on an idle connection failed: ") + std::strerror(errno));
          s.client.reset();
        } else if (!verify_get(ctx, kName, *s.client, false)) {
          s.client.reset();
        } else {
          s.due = Clock::now() + revisit;
        }
      }
    }
    // The expiring ones: readable means the server closed them (they sent nothing unasked for).
    if (::poll(watched.data(), watched.size(), 50) > 0) {
      for (std::size_t i = 0; i < watched.size(); ++i) {
        if (watched[i].revents == 0) continue;
        Slot& s = *watched_slot[i];
        if (s.client->closed_by_server()) {
          ctx.counters.add(ctx.counters.idle_expiries);
        } else {
          ctx.errors.fail(kName, "an idle connection received bytes it did not ask for");
        }
        s.client.reset();
        open(s);
      }
    }
  }
}

}  // namespace arbor::soak
