// when_all: run several tasks concurrently and wait for all of them.
//
//   auto [a, b] = co_await arbor::when_all(fetch(x), fetch(y));        // tuple
//   std::vector<int> r = co_await arbor::when_all(std::move(tasks));   // vector, in order
//
// Each task is spawned (so they run in parallel on the workers) under the caller's context:
// cancelling the caller cancels them, and when_all still returns only after all have ended. Every
// task is waited for even if one throws; then the first exception (in argument order) is rethrown.
// void results appear as std::monostate.
#pragma once

#include <exception>
#include <tuple>
#include <variant>
#include <vector>

#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

namespace detail {

template <class T>
using non_void_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

template <class T>
JoinHandle<T> start_child(const TaskContext& ctx, Task<T> task) {
  return ctx.runtime->spawn_in(std::move(task), &ctx);
}

// Not interruptible: the children run under the caller's context, which must outlive them, so
// when_all waits for each even when cancelled (they are cancelled too, and end promptly).
template <class T>
Task<non_void_t<T>> join_child(JoinHandle<T> handle) {
  if constexpr (std::is_void_v<T>) {
    co_await std::move(handle).join_uninterruptibly();
    co_return std::monostate{};
  } else {
    co_return co_await std::move(handle).join_uninterruptibly();
  }
}

template <class T>
Task<non_void_t<T>> run_inline(Task<T> task) {
  if constexpr (std::is_void_v<T>) {
    co_await std::move(task);
    co_return std::monostate{};
  } else {
    co_return co_await std::move(task);
  }
}

}  // namespace detail

template <class T>
Task<std::vector<detail::non_void_t<T>>> when_all(std::vector<Task<T>> tasks) {
  const TaskContext& ctx = co_await detail::CurrentContext{};
  std::vector<detail::non_void_t<T>> results;
  results.reserve(tasks.size());
  std::exception_ptr first_error;
  if (ctx.runtime == nullptr) {  // no workers to run on: one after another
    for (auto& t : tasks) {
      try {
        results.push_back(co_await detail::run_inline(std::move(t)));
      } catch (...) {
        if (!first_error) first_error = std::current_exception();
      }
    }
  } else {
    std::vector<JoinHandle<T>> handles;
    handles.reserve(tasks.size());
    for (auto& t : tasks)
      handles.push_back(detail::start_child(ctx, std::move(t)));
    for (auto& h : handles) {
      try {
        results.push_back(co_await detail::join_child(std::move(h)));
      } catch (...) {
        if (!first_error) first_error = std::current_exception();
      }
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  co_return results;
}

template <class... Ts>
Task<std::tuple<detail::non_void_t<Ts>...>> when_all(Task<Ts>... tasks) {
  const TaskContext& ctx = co_await detail::CurrentContext{};
  if (ctx.runtime == nullptr)
    co_return std::tuple<detail::non_void_t<Ts>...>{
        co_await detail::run_inline(std::move(tasks))...};
  auto handles = std::make_tuple(detail::start_child(ctx, std::move(tasks))...);
  std::exception_ptr first_error;
  std::tuple<std::optional<detail::non_void_t<Ts>>...> results;
  co_await [&]<std::size_t... I>(std::index_sequence<I...>)->Task<void> {
    (
        co_await [&]() -> Task<void> {
          try {
            std::get<I>(results).emplace(
                co_await detail::join_child(std::move(std::get<I>(handles))));
          } catch (...) {
            if (!first_error) first_error = std::current_exception();
          }
        }(),
        ...);
  }
  (std::index_sequence_for<Ts...>{});
  if (first_error) std::rethrow_exception(first_error);
  co_return std::apply([](auto&... r) { return std::make_tuple(std::move(*r)...); }, results);
}

}  // namespace arbor
