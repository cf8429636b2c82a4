// tls::Context: what every TLS stream made from it shares — its certificate and key, the
// certificates it trusts, how it verifies its peer, versions, ciphers, ALPN, SNI and session
// resumption (an OpenSSL SSL_CTX underneath).
//
//   auto server = arbor::tls::Context::server();
//   server->use_certificate_chain_file("cert.pem");
//   server->use_private_key_file("key.pem");
//   server->set_alpn({"http/1.1"});
//
//   auto client = arbor::tls::Context::client();   // verifies the peer and its host name
//   client->load_ca_file("ca.pem");                 // or use_default_ca(): the system's
//
// Invariant: configure a context before its first stream and not while streams are being
// made from it; from then on it is read-only and may be shared by any number of streams on
// any number of workers (the session cache has its own lock). Copies are handles to the same
// context (a reference count): a stream keeps its context alive. Renegotiation is refused
// always (a TLS 1.2 peer asking gets a no_renegotiation alert); the minimum version is TLS 1.2.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "arbor/result.hpp"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX, without its headers

namespace arbor::tls {

enum class Role { client, server };

/// How the peer's certificate is checked.
enum class Verify {
  /// No check (a client then trusts anyone: for tests against self-made servers only).
  none,
  /// A client checks the server's chain and host name (its default). A server asks for a
  /// client certificate and checks it if one is sent.
  peer,
  /// As peer; a server also fails a client that sends no certificate (mutual TLS).
  require_peer,
};

enum class Version { tls1_2, tls1_3 };

class Context {
 public:
  /// A client context: peer verification with host-name check on, no CA loaded yet (call
  /// load_ca_file, load_ca or use_default_ca).
  static Result<Context> client();
  /// A server context: no certificate yet, no client verification; session tickets on.
  static Result<Context> server();

  /// The certificate chain (leaf first, PEM) and its private key (PEM), from files or from
  /// memory (the text is copied at the call). The key must match the leaf.
  Result<void> use_certificate_chain_file(const std::string& path);
  Result<void> use_private_key_file(const std::string& path);
  Result<void> use_certificate_chain(std::string_view pem);
  Result<void> use_private_key(std::string_view pem);

  /// The certificates that verify a peer: a PEM bundle file, PEM text, or the system's.
  Result<void> load_ca_file(const std::string& path);
  Result<void> load_ca(std::string_view pem);
  Result<void> use_default_ca();

  void set_verify(Verify mode);
  Result<void> set_min_version(Version version);
  /// Cipher lists in OpenSSL's syntax: for TLS 1.2 (`set_ciphers`) and the TLS 1.3 suites.
  Result<void> set_ciphers(const std::string& tls12_list);
  Result<void> set_ciphersuites(const std::string& tls13_list);

  /// ALPN protocols, most preferred first. A client offers them; a server picks the first of
  /// its own that the client offered, and fails the handshake (no_application_protocol) when
  /// none is shared. A client that offers nothing is served without ALPN.
  Result<void> set_alpn(const std::vector<std::string>& protocols);

  /// Server: per-name certificates. `choose` gets the name the client asked for (SNI) and
  /// returns the context whose certificate to serve it with, or nullptr to keep this one. It
  /// runs during handshakes, on any worker; the contexts it returns must outlive this one.
  void on_server_name(std::function<const Context*(std::string_view name)> choose);

  /// Client: resumes sessions (TLS 1.3 tickets, TLS 1.2 tickets or ids) with servers it has
  /// talked to, keyed by host name, keeping at most `capacity` (the oldest leave first).
  /// Servers issue tickets by default.
  void enable_resumption(std::size_t capacity = 256);

  Role role() const noexcept;
  /// The SSL_CTX, for settings this class does not cover (owned by the context).
  ssl_ctx_st* native_handle() const noexcept;

  struct State;  // the SSL_CTX and what its callbacks read (context.cpp)
  const std::shared_ptr<State>& state() const noexcept { return state_; }

 private:
  friend struct ContextAccess;
  explicit Context(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace arbor::tls
