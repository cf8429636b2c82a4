// A line-based chat server: every line a client sends goes to every other client.
//
//   chat_server [HOST:PORT]        (default 127.0.0.1:7100; try a few `nc 127.0.0.1 7100`)
//
// The room is a broadcast channel. Each client has a bounded outgoing queue that a forwarder
// fills without ever waiting: a client whose queue is full is too slow, so it is told so and
// disconnected, and nobody else waits for it. A line over kMaxLine bytes ends the connection.
// Ctrl-C (SIGINT/SIGTERM) says goodbye to every client, closes each connection in order and
// exits 0; a second Ctrl-C stops at once.
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <variant>

#include "arbor/arbor.hpp"

namespace {

using namespace std::chrono_literals;
constexpr std::size_t kMaxLine = 4096;      // bytes, without the newline
constexpr std::size_t kQueueLines = 256;    // a client's outgoing queue
constexpr std::size_t kRoomBacklog = 1024;  // how far a forwarder may lag the room

struct Line {
  int from;                                 // the client who sent it
  std::shared_ptr<const std::string> text;  // shared by every receiver, newline included
};
using Room = arbor::broadcast::Sender<Line>;

void say(Room& room, int from, const std::string& text) {
  (void)room.send({from, std::make_shared<const std::string>(text + "\n")});  // never waits
}
auto bytes(const std::string& text) {
  return std::as_bytes(std::span(text));
}

// Each of a session's four parts ends with what to tell the client ("": nothing, it is gone).
arbor::Task<std::string> read_lines(arbor::TcpStream& client, int id, Room& room) {
  const std::string too_long = "line too long (max " + std::to_string(kMaxLine) + " bytes)";
  std::string pending;
  std::byte buffer[4096];
  for (;;) {
    auto n = co_await client.read_some(buffer);
    if (!n || *n == 0) co_return "";
    pending.append(reinterpret_cast<const char*>(buffer), *n);
    std::size_t start = 0;
    for (std::size_t end; (end = pending.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::size_t length = end - start - (end > start && pending[end - 1] == '\r');
      if (length > kMaxLine) co_return too_long;
      say(room, id, "client " + std::to_string(id) + ": " + pending.substr(start, length));
    }
    pending.erase(0, start);
    if (pending.size() > kMaxLine + 1) co_return too_long;  // so memory stays bounded
  }
}

arbor::Task<std::string> forward(arbor::broadcast::Receiver<Line>& room,
                                 arbor::mpsc::Sender<Line>& queue, int id) {
  for (;;) {
    auto line = co_await room.recv();
    if (!line)
      co_return line.error() == arbor::Errc::channel_lagged ? "too slow, disconnected" : "";
    if (line->from != id && !queue.try_send(std::move(*line))) co_return "too slow, disconnected";
  }
}

arbor::Task<std::string> write_lines(arbor::TcpStream& client, arbor::mpsc::Receiver<Line>& queue) {
  while (auto line = co_await queue.recv())
    if (!co_await client.write_all(bytes(*line->text))) co_return "";
  co_return "";
}

arbor::Task<std::string> stopping(arbor::Event& stop) {
  (void)co_await stop.wait();
  co_return "server shutting down";
}

arbor::Task<> drain(arbor::TcpStream& client) {  // reads until the client closes its side
  std::byte buffer[4096];
  for (;;) {
    auto n = co_await client.read_some(buffer);
    if (!n || *n == 0) co_return;
  }
}

arbor::Task<> session(arbor::TcpStream client, int id, Room& room, arbor::Event& stop) {
  auto inbox = room.subscribe();  // before the welcome: from here on, this client misses nothing
  auto [queue_tx, queue_rx] = arbor::mpsc::channel<Line>(kQueueLines);
  const std::string name = "client " + std::to_string(id);
  say(room, id, "*** " + name + " joined");
  std::string reason;
  if (co_await client.write_all(bytes("*** welcome, you are " + name + "\n"))) {
    auto first =
        co_await arbor::when_any(read_lines(client, id, room), forward(inbox, queue_tx, id),
                                 write_lines(client, queue_rx), stopping(stop));
    reason = std::visit([](std::string& r) { return std::move(r); }, first);
  }
  if (!stop.is_set())
    say(room, id, "*** " + name + " left" + (reason.empty() ? "" : ": " + reason));
  if (!reason.empty())
    (void)co_await arbor::with_timeout(2s, client.write_all(bytes("*** " + reason + "\n")));
  (void)client.shutdown_write();                          // the client reads its end of stream
  (void)co_await arbor::with_timeout(2s, drain(client));  // and closes: an orderly close
}

arbor::Task<> accept_clients(arbor::TcpListener& listener, arbor::TaskGroup<>& clients, Room& room,
                             arbor::Event& stop) {
  for (int id = 1;; ++id) {
    auto client = co_await listener.accept();
    if (!client) co_return;
    while (clients.try_next())
      continue;  // let the results of finished sessions go
    clients.spawn(session(std::move(*client), id, room, stop));
  }
}

arbor::Task<int> serve(arbor::Runtime& rt, arbor::Address address, arbor::Event& stop) {
  auto listener = arbor::TcpListener::bind(rt, address);
  if (!listener) {
    std::fprintf(stderr, "chat: cannot listen on %s: %s\n", address.to_string().c_str(),
                 listener.error().message().c_str());
    co_return 1;
  }
  std::printf("chat: listening on %s\n", listener->local_address()->to_string().c_str());
  std::fflush(stdout);
  Room room = arbor::broadcast::channel<Line>(kRoomBacklog).first;
  // The sessions are a task group: the scope ends only when every one of them has.
  co_await arbor::task_group([&](arbor::TaskGroup<>& clients) -> arbor::Task<> {
    (void)co_await arbor::when_any(accept_clients(*listener, clients, room, stop), stop.wait());
    stop.set();  // whatever ended the accept loop, the sessions say goodbye
  });
  co_return 0;
}

// Ctrl-C or SIGTERM (Windows: Ctrl-C, Ctrl-Break, the console closing): the first says goodbye
// to everyone, the second cancels everything now.
arbor::Task<> on_signals(arbor::Runtime& rt, arbor::SignalListener& signals, arbor::Event& stop) {
  // Into variables, not awaited in an `if`: GCC 12 skips such a body (docs/guide.md, case 4).
  auto first = co_await signals.recv();
  if (!first) co_return;
  stop.set();
  auto second = co_await signals.recv();
  if (second) rt.request_stop();
}

}  // namespace

int main(int argc, char** argv) {
  auto address = arbor::Address::parse(argc > 1 ? argv[1] : "127.0.0.1:7100");
  if (!address) {
    std::fprintf(stderr, "usage: chat_server [HOST:PORT]  (e.g. 127.0.0.1:7100, [::1]:7100)\n");
    return 2;
  }
  arbor::Event stop;  // outlives the runtime
  arbor::Runtime rt;
  auto signals = arbor::signal(rt, {SIGINT, SIGTERM});  // from now on: an early one is kept
  if (!signals) {
    std::fprintf(stderr, "chat: cannot listen for signals: %s\n",
                 signals.error().message().c_str());
    return 1;
  }
  rt.spawn(on_signals(rt, *signals, stop)).detach();
  const int status = rt.block_on(serve(rt, *address, stop));
  rt.shutdown();  // every task has ended, on_signals too, before its listener goes
  return status;
}
