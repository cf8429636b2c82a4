// Command-line flags of the HTTP example server.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "arbor/arbor.hpp"
#include "arbor/http/server.hpp"

namespace arbor::example {

struct Flags {
  http::ServerOptions server;  // server.tls: the context --tls-cert and --tls-key made, if given
  RuntimeOptions runtime;
  std::chrono::milliseconds shutdown_timeout{5000};
  bool help = false;
};

/// Parses argv over the environment's runtime options (ARBOR_*). Returns the flags, or an error
/// message naming the bad flag. With --tls-cert and --tls-key it also loads them into a TLS
/// server context (ALPN http/1.1), so a file that cannot be read, or a key that does not match
/// the certificate, is reported here, as a flag error.
std::variant<Flags, std::string> parse_flags(const std::vector<std::string>& args);

/// The --help text.
const char* usage() noexcept;

}  // namespace arbor::example
