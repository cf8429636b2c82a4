// Context::State: the SSL_CTX and what its callbacks read (private to the TLS layer).
//
// Invariant: the State owns exactly one reference to its SSL_CTX and is reachable from it (the
// SSL_CTX's app data), so a callback finds its settings from the SSL it is called for. It
// lives as long as the last Context handle or stream holding it; only the resumption cache
// changes after configuration, under its own mutex.
#pragma once

#include <openssl/ssl.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "arbor/tls/context.hpp"

namespace arbor::tls {

struct Context::State {
  State(SSL_CTX* c, Role r) noexcept : ctx(c), role(r) {}
  ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  SSL_CTX* ctx;
  Role role;
  std::string alpn_wire;  // ALPN protocols in wire format: length-prefixed names
  std::function<const Context*(std::string_view)> choose_by_name;

  // Client resumption: host name -> its newest session, oldest first; one reference each.
  std::mutex cache_lock;
  std::size_t cache_capacity = 0;
  std::deque<std::pair<std::string, SSL_SESSION*>> cache;

  /// The session to resume with `host`, with a reference for the caller, or nullptr.
  SSL_SESSION* recall(std::string_view host);
  /// Keeps `session` (its reference is taken) as `host`'s newest.
  void remember(std::string host, SSL_SESSION* session);
};

namespace detail {
/// The host name a client stream was made for (what the resumption cache is keyed by);
/// defined with the stream, whose state is the SSL's app data.
const std::string* host_of(const SSL* ssl) noexcept;
}  // namespace detail

}  // namespace arbor::tls
