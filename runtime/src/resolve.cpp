// resolve(): input checks and numeric hosts here, on the caller's worker; names through
// getaddrinfo() on the blocking pool. Invariant: a successful result is never empty, holds
// each address once, and holds only AF_INET / AF_INET6 addresses (what Address can be).
#include "arbor/runtime/resolve.hpp"

#if defined(_WIN32)
// clang-format off
#include <winsock2.h>
#include <ws2tcpip.h>
// clang-format on
#else
#include <netdb.h>
#include <sys/socket.h>
#endif

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>
#include <utility>

#include "arbor/runtime/runtime.hpp"
#include "arbor/runtime/timer.hpp"

namespace arbor {

namespace {

class ResolveCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "arbor.resolve"; }
  std::string message(int code) const override {
    switch (static_cast<ResolveErrc>(code)) {
      case ResolveErrc::host_not_found:
        return "host not found (no such name, or it has no address)";
      case ResolveErrc::try_again:
        return "the name server could not answer now; try again";
      case ResolveErrc::failed:
        return "name resolution failed";
    }
    return "unknown name resolution error";
  }
};

// A DNS name is at most 253 characters in text; a longer host cannot resolve, and refusing it
// here keeps an attacker's megabyte out of the resolver.
constexpr std::size_t kMaxHost = 253;

std::error_code check_host(std::string_view host) noexcept {
  if (host.empty() || host.size() > kMaxHost || host.find('\0') != std::string_view::npos)
    return std::make_error_code(std::errc::invalid_argument);
  return {};
}

// The numeric forms, without the resolver: "1.2.3.4" and "::1" (no brackets here).
Result<Address> numeric(std::string_view host, std::uint16_t port) {
  std::string text;
  if (host.find(':') != std::string_view::npos) {
    text.append("[").append(host).append("]");
  } else {
    text.append(host);
  }
  text.append(":").append(std::to_string(port));
  return Address::parse(text);
}

Task<Result<std::vector<Address>>> resolve_owned(Runtime& runtime, std::string host,
                                                 std::uint16_t port) {
  if (auto bad = check_host(host)) co_return bad;
  if (auto address = numeric(host, port)) co_return std::vector<Address>{*address};
  auto lookup = runtime.spawn_blocking(
      [host = std::move(host), port] { return detail::resolve_blocking(host, port); });
  try {
    co_return co_await std::move(lookup);
  } catch (const std::system_error& e) {  // our wait was cancelled; the lookup runs on
    co_return e.code();
  }
}

Task<Result<std::vector<Address>>> resolve_within(Task<Result<std::vector<Address>>> lookup,
                                                  std::chrono::milliseconds timeout) {
  co_return co_await with_timeout(timeout, std::move(lookup));
}

}  // namespace

const std::error_category& resolve_category() noexcept {
  static const ResolveCategory category;
  return category;
}

namespace detail {

std::error_code from_getaddrinfo(int rc) noexcept {
  // if-chains, not a switch: some of these are aliases of each other on some platforms.
  if (rc == EAI_NONAME) return make_error_code(ResolveErrc::host_not_found);
#if defined(EAI_NODATA)
  if (rc == EAI_NODATA) return make_error_code(ResolveErrc::host_not_found);
#endif
#if defined(EAI_ADDRFAMILY)
  if (rc == EAI_ADDRFAMILY) return make_error_code(ResolveErrc::host_not_found);
#endif
  if (rc == EAI_AGAIN) return make_error_code(ResolveErrc::try_again);
  if (rc == EAI_MEMORY) return std::make_error_code(std::errc::not_enough_memory);
  if (rc == EAI_SERVICE || rc == EAI_FAMILY || rc == EAI_SOCKTYPE || rc == EAI_BADFLAGS)
    return std::make_error_code(std::errc::invalid_argument);
#if defined(EAI_SYSTEM)
  if (rc == EAI_SYSTEM && errno != 0) return {errno, std::generic_category()};
#endif
  return make_error_code(ResolveErrc::failed);
}

Result<std::vector<Address>> resolve_blocking(std::string_view host, std::uint16_t port) {
  if (auto bad = check_host(host)) return bad;
  const std::string name(host);
  char service[8];
  *std::to_chars(service, service + sizeof service - 1, port).ptr = '\0';
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;      // both families: connect() decides the order of attempts
  hints.ai_socktype = SOCK_STREAM;  // one entry per address, not one per socket type
#if defined(AI_NUMERICSERV)
  hints.ai_flags = AI_NUMERICSERV;  // the port is a number: no services database lookup
#endif
  addrinfo* list = nullptr;
  if (const int rc = ::getaddrinfo(name.c_str(), service, &hints, &list); rc != 0)
    return from_getaddrinfo(rc);
  std::vector<Address> addresses;
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) || ai->ai_addr == nullptr ||
        ai->ai_addrlen > Address::capacity())
      continue;
    Address address;
    std::memcpy(address.native(), ai->ai_addr, ai->ai_addrlen);
    if (std::find(addresses.begin(), addresses.end(), address) == addresses.end())
      addresses.push_back(address);
  }
  ::freeaddrinfo(list);
  if (addresses.empty()) return make_error_code(ResolveErrc::host_not_found);
  return addresses;
}

}  // namespace detail

Task<Result<std::vector<Address>>> resolve(Runtime& runtime, std::string_view host,
                                           std::uint16_t port) {
  return resolve_owned(runtime, std::string(host), port);  // the name is the frame's from here
}

Task<Result<std::vector<Address>>> resolve(Runtime& runtime, std::string_view host_port) {
  auto split = detail::split_host_port(host_port);
  if (!split) return resolve_owned(runtime, std::string(), 0);  // empty host: invalid_argument
  return resolve_owned(runtime, std::string(split->first), split->second);
}

Task<Result<std::vector<Address>>> resolve(Runtime& runtime, std::string_view host_port,
                                           std::chrono::milliseconds timeout) {
  return resolve_within(resolve(runtime, host_port), timeout);  // the lookup owns its name
}

}  // namespace arbor
