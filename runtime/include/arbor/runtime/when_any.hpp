// when_any: race awaitables; the first to finish wins, the others are cancelled, and when_any
// returns only after every one of them has finished (no task outlives the call).
//
//   std::variant<int, std::string> r = co_await arbor::when_any(read_int(), read_text());
//   if (r.index() == 0) ...                                  // which one won, and its value
//   auto [i, v] = co_await arbor::when_any(std::move(tasks)); // vector: index and value
//
// Each contestant is spawned (they run in parallel on the workers) in a cancellation scope
// linked to the caller's: the first to finish claims the win with one atomic exchange and stops
// the scope, which cancels the others (their waits complete with operation_canceled, see
// cancel.hpp); cancelling the caller cancels them all, and the first to finish still wins.
// "Finish" includes returning an error Result: a Result is a value like any other.
//
// Exceptions: a contestant that throws first wins, and its exception is rethrown from when_any
// after the others have finished. If starting a contestant throws (std::bad_alloc), those
// already started are cancelled and joined, then the exception leaves when_any. Exceptions and
// values of the losers are discarded. void results appear as std::monostate. Ownership: the
// awaitables (or tasks) are moved into when_any; the result is the caller's.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <exception>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "arbor/runtime/error.hpp"
#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/task.hpp"
#include "arbor/runtime/when_all.hpp"

namespace arbor {

namespace detail {

template <class Winner>
struct Race {
  explicit Race(const TaskContext& outer) : scope(outer) {}
  StopScope scope;
  // Written only by the contestant that won the exchange, read by when_any after joining every
  // contestant (the join's acq_rel handoff orders the write before the read).
  std::atomic<bool> decided{false};
  std::optional<Winner> winner;
  std::exception_ptr error;
};

template <class Winner, class Make, class T>
Task<void> contestant(Task<T> task, Race<Winner>& race, Make make) {
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(task);
      if (!race.decided.exchange(true, std::memory_order_acq_rel))
        race.winner.emplace(make(std::monostate{}));
    } else {
      T value = co_await std::move(task);
      if (!race.decided.exchange(true, std::memory_order_acq_rel))
        race.winner.emplace(make(std::move(value)));
    }
  } catch (...) {
    if (!race.decided.exchange(true, std::memory_order_acq_rel))
      race.error = std::current_exception();
  }
  race.scope.request_stop();  // cancel the others (a no-op after the first)
}

inline const TaskContext& require_runtime(const TaskContext& ctx) {
  if (ctx.runtime == nullptr) throw std::system_error(make_error_code(Errc::not_in_runtime));
  return ctx;
}

// Starting a contestant failed (no memory for its frame): the ones already started run in
// `race`, which lives in when_any's frame, so they are cancelled and joined before the error
// leaves when_any (WhenAnyAllocationFailure.AFailedStartCancelsAndJoinsTheStartedOnes).
template <class Winner>
std::exception_ptr stop_the_started(Race<Winner>& race) noexcept {
  race.scope.request_stop();
  return std::current_exception();
}

template <class Winner>
Winner race_result(Race<Winner>& race) {
  if (race.error) std::rethrow_exception(race.error);
  return std::move(*race.winner);
}

}  // namespace detail

/// Races the awaitables (Tasks or any awaitables; moved in). Returns a std::variant whose
/// index() is the winner's position and whose alternative holds its value.
template <class... As>
requires(sizeof...(As) > 0) Task<std::variant<detail::non_void_t<
    std::remove_cvref_t<detail::await_result_t<As>>>...>> when_any(As... awaitables) {
  using Winner =
      std::variant<detail::non_void_t<std::remove_cvref_t<detail::await_result_t<As>>>...>;
  const TaskContext& ctx = detail::require_runtime(co_await detail::CurrentContext{});
  detail::Race<Winner> race(ctx);
  std::array<std::optional<JoinHandle<void>>, sizeof...(As)> handles;
  std::exception_ptr failed;
  try {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (handles[I].emplace(ctx.runtime->spawn_in(
           detail::contestant(detail::as_task(std::move(awaitables)), race,
                              [](auto&& v) {
                                return Winner(std::in_place_index<I>, std::forward<decltype(v)>(v));
                              }),
           &race.scope.context())),
       ...);
    }
    (std::index_sequence_for<As...>{});
  } catch (...) {
    failed = detail::stop_the_started(race);
  }
  for (auto& h : handles)
    if (h) co_await std::move(*h).join_uninterruptibly();
  if (failed) std::rethrow_exception(failed);
  co_return detail::race_result(race);
}

/// Races tasks of one type: returns {index of the winner, its value}. Throws
/// std::invalid_argument for an empty vector (nothing would ever finish).
template <class T>
Task<std::pair<std::size_t, detail::non_void_t<T>>> when_any(std::vector<Task<T>> tasks) {
  using Winner = std::pair<std::size_t, detail::non_void_t<T>>;
  if (tasks.empty()) throw std::invalid_argument("arbor::when_any: no tasks");
  const TaskContext& ctx = detail::require_runtime(co_await detail::CurrentContext{});
  detail::Race<Winner> race(ctx);
  std::vector<JoinHandle<void>> handles;
  handles.reserve(tasks.size());
  std::exception_ptr failed;
  try {
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      auto make = [i](auto&& v) { return Winner(i, std::forward<decltype(v)>(v)); };
      handles.push_back(ctx.runtime->spawn_in(detail::contestant(std::move(tasks[i]), race, make),
                                              &race.scope.context()));
    }
  } catch (...) {
    failed = detail::stop_the_started(race);
  }
  for (auto& h : handles)
    co_await std::move(h).join_uninterruptibly();
  if (failed) std::rethrow_exception(failed);
  co_return detail::race_result(race);
}

}  // namespace arbor
