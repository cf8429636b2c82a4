// BoundHandler: a completion handler with its arguments, callable with none, that keeps the
// handler's associated executor and allocator (Asio finds them through it), so posting or
// dispatching it still runs the handler where the handler says and allocates as it says.
#pragma once

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_executor.hpp>
#include <tuple>
#include <utility>

namespace arbor::asio::detail {

template <class Handler, class... Args>
struct BoundHandler {
  Handler handler;
  std::tuple<Args...> args;
  void operator()() { std::apply(std::move(handler), std::move(args)); }
};

template <class Handler, class... Args>
BoundHandler<Handler, std::decay_t<Args>...> bind_result(Handler&& handler, Args&&... args) {
  return {std::move(handler), {std::forward<Args>(args)...}};
}

}  // namespace arbor::asio::detail

namespace boost::asio {

template <class Handler, class... Args, class Executor>
struct associated_executor<arbor::asio::detail::BoundHandler<Handler, Args...>, Executor> {
  using type = associated_executor_t<Handler, Executor>;
  static type get(const arbor::asio::detail::BoundHandler<Handler, Args...>& b,
                  const Executor& e = Executor()) noexcept {
    return associated_executor<Handler, Executor>::get(b.handler, e);
  }
};

template <class Handler, class... Args, class Allocator>
struct associated_allocator<arbor::asio::detail::BoundHandler<Handler, Args...>, Allocator> {
  using type = associated_allocator_t<Handler, Allocator>;
  static type get(const arbor::asio::detail::BoundHandler<Handler, Args...>& b,
                  const Allocator& a = Allocator()) noexcept {
    return associated_allocator<Handler, Allocator>::get(b.handler, a);
  }
};

}  // namespace boost::asio
