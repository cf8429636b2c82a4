// connect_first and TcpStream::connect by name. Invariant: attempt i starts only after attempt
// i-1 has started (so the order holds), and then as soon as it has failed or `stagger` has
// passed; every attempt is a child of the call's task group, so all have ended when it returns.
#include "arbor/runtime/happy_eyeballs.hpp"

#include <memory>
#include <optional>
#include <system_error>
#include <utility>

#include "arbor/runtime/event.hpp"
#include "arbor/runtime/resolve.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/task_group.hpp"
#include "arbor/runtime/timer.hpp"

namespace arbor {

namespace {

struct Race {
  explicit Race(std::vector<Address> a)
      : order(std::move(a)),
        started(std::make_unique<Event[]>(order.size())),
        failed(std::make_unique<Event[]>(order.size())),
        errors(order.size()) {}
  std::vector<Address> order;
  std::unique_ptr<Event[]> started;  // attempt i has begun connecting
  std::unique_ptr<Event[]> failed;   // attempt i has failed: the next may go at once
  std::vector<std::error_code> errors;  // attempt i's failure, if it failed (not cancelled)
};

Task<Result<TcpStream>> attempt(Runtime& runtime, Race& race, std::size_t i,
                                std::chrono::milliseconds stagger) {
  const auto cancelled = std::make_error_code(std::errc::operation_canceled);
  if (i > 0) {
    // Cancelled (another attempt won, or the caller gave up): these waits say so.
    if (!co_await race.started[i - 1].wait()) co_return cancelled;
    auto previous = co_await with_timeout(stagger, race.failed[i - 1].wait());
    if (!previous && previous.error() == std::errc::operation_canceled) co_return cancelled;
    // Otherwise it failed (success) or the stagger passed (timed_out): our turn.
  }
  race.started[i].set();
  auto stream = co_await TcpStream::connect(runtime, race.order[i]);
  if (!stream) {
    race.errors[i] = stream.error();
    race.failed[i].set();
  }
  co_return stream;
}

Task<Result<TcpStream>> race_all(Runtime& runtime, Race& race, std::chrono::milliseconds stagger) {
  auto body = [&](TaskGroup<Result<TcpStream>>& group) -> Task<Result<TcpStream>> {
    for (std::size_t i = 0; i < race.order.size(); ++i)
      group.spawn(attempt(runtime, race, i, stagger));
    std::optional<TcpStream> winner;
    while (auto result = co_await group.next()) {
      if (*result && !winner) {
        winner.emplace(std::move(**result));
        group.cancel();  // the rest stop; one that connects anyway is closed as it drops
      }
    }
    if (winner) co_return std::move(*winner);
    co_return connection_failure(race.errors);
  };
  auto group = task_group<Result<TcpStream>>(std::move(body));
  co_return co_await std::move(group);
}

Task<Result<TcpStream>> connect_named(Runtime& runtime, Task<Result<std::vector<Address>>> lookup) {
  auto addresses = co_await std::move(lookup);
  if (!addresses) co_return addresses.error();
  auto connecting = connect_first(runtime, std::move(*addresses));
  co_return co_await std::move(connecting);
}

Task<Result<TcpStream>> connect_named_within(Runtime& runtime,
                                             Task<Result<std::vector<Address>>> lookup,
                                             std::chrono::milliseconds timeout) {
  auto connecting = connect_named(runtime, std::move(lookup));
  co_return co_await with_timeout(timeout, std::move(connecting));
}

}  // namespace

std::vector<Address> connection_attempt_order(std::vector<Address> addresses) {
  if (addresses.empty()) return addresses;
  const bool first_v6 = addresses.front().is_v6();
  std::vector<Address> preferred;
  std::vector<Address> other;
  for (const Address& a : addresses)
    (a.is_v6() == first_v6 ? preferred : other).push_back(a);
  std::vector<Address> order;
  order.reserve(addresses.size());
  std::size_t p = 0;
  std::size_t o = 0;
  while (p < preferred.size() || o < other.size()) {
    if (p < preferred.size()) order.push_back(preferred[p++]);
    if (o < other.size()) order.push_back(other[o++]);
  }
  return order;
}

std::error_code connection_failure(const std::vector<std::error_code>& in_attempt_order) {
  // 2: a host at the address answered; 0: this host cannot use the address at all, so the
  // attempt says nothing of the peer; 1: the rest (timed out, no route on the way, ...).
  const auto how_telling = [](std::error_code e) {
    if (e == std::errc::connection_refused || e == std::errc::connection_reset) return 2;
    if (e == std::errc::network_unreachable || e == std::errc::address_not_available ||
        e == std::errc::address_family_not_supported)
      return 0;
    return 1;
  };
  std::error_code best;
  for (const std::error_code& e : in_attempt_order) {
    if (!e || e == std::errc::operation_canceled) continue;
    if (!best || how_telling(e) > how_telling(best)) best = e;  // ties: the earlier attempt
  }
  return best ? best : std::make_error_code(std::errc::operation_canceled);
}

Task<Result<TcpStream>> connect_first(Runtime& runtime, std::vector<Address> addresses,
                                      std::chrono::milliseconds stagger) {
  if (addresses.empty()) co_return std::make_error_code(std::errc::invalid_argument);
  Race race(connection_attempt_order(std::move(addresses)));
  if (race.order.size() == 1) co_return co_await TcpStream::connect(runtime, race.order[0]);
  auto racing = race_all(runtime, race, stagger);
  co_return co_await std::move(racing);
}

Task<Result<TcpStream>> TcpStream::connect(Runtime& runtime, std::string_view host_port) {
  return connect_named(runtime, resolve(runtime, host_port));  // the lookup owns the name
}

Task<Result<TcpStream>> TcpStream::connect(Runtime& runtime, std::string_view host_port,
                                           std::chrono::milliseconds timeout) {
  return connect_named_within(runtime, resolve(runtime, host_port), timeout);
}

}  // namespace arbor
