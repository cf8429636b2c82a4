// A line-protocol key/value server: one command per line, one reply line per command.
//
//   kv_server [HOST:PORT] [--max-keys N] [--idle-timeout SECONDS]
//                                       (default 127.0.0.1:7300; try `nc 127.0.0.1 7300`)
//
//   PING              -> PONG
//   SET key value...  -> OK                  (the value is the rest of the line, spaces and all)
//   GET key           -> VALUE value | NIL
//   DEL key           -> DELETED | NIL
//   INCR key [by]     -> INT n               (a missing key counts as 0)
//   COUNT             -> INT n               (keys in the store)
//   QUIT              -> BYE, then the server closes the connection
//   anything else     -> ERR reason          (the connection stays usable)
//
// What it shows of arbor: a BufferedReader frames the commands (read_line with a maximum, and
// skip_until to get past a line that is too long without losing the connection's framing); a
// BufferedWriter gathers the replies, and is flushed only when no further command is already
// buffered, so a client that pipelines N commands gets its N replies in one write; an idle
// client, and one that stops reading its replies, is cut by with_timeout around the read and the
// writes; a task group ends only when every session has.
//
// The store is bounded (--max-keys, keys up to kMaxKey bytes, lines up to kMaxLine), sharded, and
// each shard's lock is held for one map operation, never across an await. SIGINT/SIGTERM stops
// accepting and cancels every session where it waits (exit status 0); a second signal stops the
// runtime at once.
#include <atomic>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>

#include "arbor/arbor.hpp"

namespace {

using namespace std::chrono_literals;
constexpr std::size_t kMaxLine = 4096;  // bytes, line ending included
constexpr std::size_t kMaxKey = 250;
constexpr std::size_t kShards = 16;

// A bounded, sharded map. The key count is kept apart from the shards so the bound is global.
class Store {
 public:
  explicit Store(std::size_t max_keys) : max_keys_(max_keys) {}

  std::optional<std::string> get(std::string_view key) {
    Shard& s = shard(key);
    std::lock_guard lock(s.mutex);
    auto it = s.map.find(std::string(key));
    if (it == s.map.end()) return std::nullopt;
    return it->second;
  }
  // False if the key is new and the store is full.
  bool set(std::string_view key, std::string_view value) {
    Shard& s = shard(key);
    std::lock_guard lock(s.mutex);
    auto it = s.map.find(std::string(key));
    if (it != s.map.end()) {
      it->second.assign(value);
      return true;
    }
    if (!reserve()) return false;
    s.map.emplace(key, value);
    return true;
  }
  bool erase(std::string_view key) {
    Shard& s = shard(key);
    std::lock_guard lock(s.mutex);
    if (s.map.erase(std::string(key)) == 0) return false;
    count_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
  // The new value, or why not: "not an integer", "overflow", "store full".
  std::variant<long long, const char*> increment(std::string_view key, long long by) {
    Shard& s = shard(key);
    std::lock_guard lock(s.mutex);
    auto it = s.map.find(std::string(key));
    long long value = 0;
    if (it != s.map.end() && !parse_integer(it->second, value)) return "not an integer";
    if (__builtin_add_overflow(value, by, &value)) return "overflow";
    if (it == s.map.end()) {
      if (!reserve()) return "store full";
      s.map.emplace(key, std::to_string(value));
    } else {
      it->second = std::to_string(value);
    }
    return value;
  }
  std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }

  static bool parse_integer(std::string_view text, long long& out) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size() && !text.empty();
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::string> map;
  };
  Shard& shard(std::string_view key) {
    return shards_[std::hash<std::string_view>{}(key) % kShards];
  }
  // Counts a new key in, if there is room. Relaxed: the count is a bound, not a publication.
  bool reserve() {
    std::size_t n = count_.load(std::memory_order_relaxed);
    do {
      if (n >= max_keys_) return false;
    } while (!count_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
    return true;
  }

  const std::size_t max_keys_;
  std::atomic<std::size_t> count_{0};
  Shard shards_[kShards];
};

// The first word of `line` (up to a space), and the rest after the spaces that follow it.
std::pair<std::string_view, std::string_view> split_word(std::string_view line) {
  const auto space = line.find(' ');
  if (space == std::string_view::npos) return {line, {}};
  auto rest = line.substr(space);
  rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
  return {line.substr(0, space), rest};
}

struct Reply {
  std::string text;   // without the newline
  bool quit = false;  // close after sending it
};

Reply execute(Store& store, std::string_view line) {
  const auto [command, args] = split_word(line);
  const auto [key, rest] = split_word(args);
  const bool has_key = !key.empty();
  if (has_key && key.size() > kMaxKey)
    return {"ERR key too long (max " + std::to_string(kMaxKey) + " bytes)"};
  if (command == "PING" && args.empty()) return {"PONG"};
  if (command == "GET" && has_key && rest.empty()) {
    auto value = store.get(key);
    return {value ? "VALUE " + *value : "NIL"};
  }
  if (command == "SET" && has_key) return {store.set(key, rest) ? "OK" : "ERR store full"};
  if (command == "DEL" && has_key && rest.empty()) return {store.erase(key) ? "DELETED" : "NIL"};
  if (command == "INCR" && has_key) {
    long long by = 1;
    if (!rest.empty() && !Store::parse_integer(rest, by)) return {"ERR not an integer"};
    auto result = store.increment(key, by);
    if (auto* error = std::get_if<const char*>(&result)) return {std::string("ERR ") + *error};
    return {"INT " + std::to_string(std::get<long long>(result))};
  }
  if (command == "COUNT" && args.empty()) return {"INT " + std::to_string(store.size())};
  if (command == "QUIT" && args.empty()) return {"BYE", true};
  if (command == "PING" || command == "GET" || command == "SET" || command == "DEL" ||
      command == "INCR" || command == "COUNT" || command == "QUIT")
    return {"ERR wrong arguments for " + std::string(command)};
  return {"ERR unknown command"};
}

struct Settings {
  arbor::Address address;
  std::size_t max_keys = 1'000'000;
  std::chrono::seconds idle_timeout{300};
};

arbor::Task<> session(arbor::TcpStream client, Store& store, const Settings& settings) {
  arbor::BufferedReader reader(client);
  arbor::BufferedWriter writer(client);
  for (;;) {
    // Replies go out when the client has nothing more waiting: a pipelined batch, one write.
    // A client that sends and never reads is cut when a write makes no progress for the idle
    // timeout: it would otherwise hold its session for ever.
    if (reader.buffered().empty() && writer.buffered() > 0) {
      auto flushed = co_await arbor::with_timeout(settings.idle_timeout, writer.flush());
      if (!flushed) co_return;
    }
    auto line = co_await arbor::with_timeout(settings.idle_timeout, reader.read_line(kMaxLine));
    Reply reply;
    if (!line) {
      const auto error = line.error();
      if (error == arbor::Errc::frame_too_long) {
        // The line is lost, the framing is not: skip to its end and carry on.
        reply.text = "ERR line too long (max " + std::to_string(kMaxLine) + " bytes)";
        if (!co_await reader.skip_until('\n')) reply.quit = true;
      } else if (error == std::errc::timed_out) {
        reply = {"ERR idle timeout", true};
      } else {
        co_return;  // the client closed (end_of_stream, incomplete_frame) or the stream broke
      }
    } else {
      reply = execute(store, *line);
    }
    reply.text += '\n';
    auto written = co_await arbor::with_timeout(settings.idle_timeout,
                                                writer.write(std::as_bytes(std::span(reply.text))));
    if (!written) co_return;
    if (reply.quit) break;
  }
  auto flushed = co_await arbor::with_timeout(settings.idle_timeout, writer.flush());
  if (flushed) (void)client.shutdown_write();
}

arbor::Task<> accept_clients(arbor::TcpListener& listener, arbor::TaskGroup<>& clients,
                             Store& store, const Settings& settings) {
  for (;;) {
    auto client = co_await listener.accept();
    if (!client) co_return;
    (void)client->set_no_delay(true);
    while (clients.try_next())
      continue;  // let the results of finished sessions go
    clients.spawn(session(std::move(*client), store, settings));
  }
}

arbor::Task<int> serve(arbor::Runtime& rt, const Settings& settings, arbor::Event& stop) {
  auto listener = arbor::TcpListener::bind(rt, settings.address);
  if (!listener) {
    std::fprintf(stderr, "kv: cannot listen on %s: %s\n", settings.address.to_string().c_str(),
                 listener.error().message().c_str());
    co_return 1;
  }
  std::printf("kv: listening on %s\n", listener->local_address()->to_string().c_str());
  std::fflush(stdout);
  Store store(settings.max_keys);
  // Every session runs in the group, under when_any with the stop: a stop cancels each one
  // where it waits, and the group's scope ends only when all of them have.
  co_await arbor::task_group([&](arbor::TaskGroup<>& clients) -> arbor::Task<> {
    (void)co_await arbor::when_any(accept_clients(*listener, clients, store, settings),
                                   stop.wait());
    clients.cancel();
  });
  co_return 0;
}

// SIGINT or SIGTERM (Windows: Ctrl-C, Ctrl-Break, the console closing): the first ends the
// sessions, the second cancels everything now.
arbor::Task<> on_signals(arbor::Runtime& rt, arbor::SignalListener& signals, arbor::Event& stop) {
  // Into variables, not awaited in an `if`: GCC 12 skips such a body (docs/guide.md, case 4).
  auto first = co_await signals.recv();
  if (!first) co_return;
  stop.set();
  auto second = co_await signals.recv();
  if (second) rt.request_stop();
}

std::optional<Settings> parse_arguments(int argc, char** argv) {
  Settings settings;
  settings.address = *arbor::Address::parse("127.0.0.1:7300");
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    long long n = 0;
    if (arg == "--max-keys" && has_value && Store::parse_integer(argv[i + 1], n) && n > 0) {
      settings.max_keys = static_cast<std::size_t>(n);
      ++i;
    } else if (arg == "--idle-timeout" && has_value && Store::parse_integer(argv[i + 1], n) &&
               n > 0 && n <= 86'400) {
      settings.idle_timeout = std::chrono::seconds(n);
      ++i;
    } else if (auto address = arbor::Address::parse(arg); address && i == 1) {
      settings.address = *address;
    } else {
      return std::nullopt;
    }
  }
  return settings;
}

}  // namespace

int main(int argc, char** argv) {
  const auto settings = parse_arguments(argc, argv);
  if (!settings) {
    std::fprintf(stderr,
                 "usage: kv_server [HOST:PORT] [--max-keys N] [--idle-timeout SECONDS]\n"
                 "  (e.g. 127.0.0.1:7300, [::1]:7300; N > 0; 0 < SECONDS <= 86400)\n");
    return 2;
  }
  arbor::Event stop;  // outlives the runtime
  arbor::Runtime rt;
  auto signals = arbor::signal(rt, {SIGINT, SIGTERM});  // from now on: an early one is kept
  if (!signals) {
    std::fprintf(stderr, "kv: cannot listen for signals: %s\n", signals.error().message().c_str());
    return 1;
  }
  rt.spawn(on_signals(rt, *signals, stop)).detach();
  const int status = rt.block_on(serve(rt, *settings, stop));
  rt.shutdown();  // every task has ended, on_signals too, before its listener goes
  return status;
}
