// The example server's endpoints: /plaintext, /json (rapidjson, per request), /metrics
// (Prometheus text: scheduler, event pool, frame pool, engine and server counters) and /echo
// (POST: the request body back).
#pragma once

#include <atomic>
#include <span>

#include "arbor/arbor.hpp"
#include "arbor/http/server.hpp"

namespace arbor::example {

class Routes {
 public:
  explicit Routes(Runtime& runtime) noexcept : runtime_(runtime) {}
  /// The server whose counters /metrics reports (set once it exists).
  void attach(const http::Server& server) noexcept { server_.store(&server); }

  http::Reply operator()(const http::Request& request, std::span<char> scratch) const;

 private:
  std::size_t metrics(std::span<char> out) const;

  Runtime& runtime_;
  std::atomic<const http::Server*> server_{nullptr};
};

}  // namespace arbor::example
