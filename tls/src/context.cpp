// tls::Context over OpenSSL's SSL_CTX: settings, and the callbacks for ALPN, SNI and the
// client's resumption cache.
//
// Invariant: every setter either applies fully or leaves the context as it was and returns
// OpenSSL's reason (the per-thread error queue is emptied either way).
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "context_state.hpp"
#include "error_internal.hpp"

namespace arbor::tls {

struct ContextAccess {
  static Context wrap(std::shared_ptr<Context::State> state) { return Context(std::move(state)); }
};

namespace {

Result<void> check(int ok) {
  if (ok == 1) return {};
  return detail::take_openssl_error();
}

struct BioFree {
  void operator()(BIO* b) const noexcept { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr memory(std::string_view pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

Context::State* state_of(SSL_CTX* ctx) noexcept {
  return static_cast<Context::State*>(SSL_CTX_get_app_data(ctx));
}

// ALPN, server side: the first of the server's protocols the client offered; none shared
// fails the handshake with no_application_protocol (RFC 7301).
int select_alpn(SSL* ssl, const unsigned char** out, unsigned char* out_size,
                const unsigned char* offered, unsigned int offered_size, void*) {
  const auto* state = state_of(SSL_get_SSL_CTX(ssl));
  if (state->alpn_wire.empty()) return SSL_TLSEXT_ERR_NOACK;
  unsigned char* chosen = nullptr;
  const int r = SSL_select_next_proto(
      &chosen, out_size, reinterpret_cast<const unsigned char*>(state->alpn_wire.data()),
      static_cast<unsigned int>(state->alpn_wire.size()), offered, offered_size);
  if (r != OPENSSL_NPN_NEGOTIATED) return SSL_TLSEXT_ERR_ALERT_FATAL;
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

// SNI: switch the connection to the context the user's callback chose for the name.
int choose_context(SSL* ssl, int* alert, void* arg) {
  const auto* state = static_cast<const Context::State*>(arg);
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (name == nullptr || !state->choose_by_name) return SSL_TLSEXT_ERR_OK;
  try {
    const Context* chosen = state->choose_by_name(name);
    if (chosen != nullptr && chosen->native_handle() != SSL_get_SSL_CTX(ssl))
      SSL_set_SSL_CTX(ssl, chosen->native_handle());
    return SSL_TLSEXT_ERR_OK;
  } catch (...) {
    *alert = SSL_AD_INTERNAL_ERROR;  // a throwing callback fails this handshake, nothing more
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
}

// A client got a session (after the handshake in TLS 1.2, with each ticket in TLS 1.3).
int new_session(SSL* ssl, SSL_SESSION* session) {
  auto* state = state_of(SSL_get_SSL_CTX(ssl));
  const std::string* host = detail::host_of(ssl);
  if (host == nullptr || host->empty() || state->cache_capacity == 0) return 0;
  try {
    state->remember(*host, session);
  } catch (...) {
    return 0;  // not kept: OpenSSL keeps its reference and frees the session
  }
  return 1;  // the cache holds the reference OpenSSL gave us
}

Result<Context> make(Role role) {
  SSL_CTX* ctx = SSL_CTX_new(role == Role::client ? TLS_client_method() : TLS_server_method());
  if (ctx == nullptr) return detail::take_openssl_error();
  auto state = std::make_shared<Context::State>(ctx, role);
  SSL_CTX_set_app_data(ctx, state.get());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  // The stream retries a write with the same span; never release the record buffers (that
  // would allocate them again for every record).
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_clear_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  if (role == Role::client) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  } else {
    static const unsigned char kId[] = "arbor";
    SSL_CTX_set_session_id_context(ctx, kId, sizeof kId - 1);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, nullptr);
    SSL_CTX_set_tlsext_servername_callback(ctx, choose_context);
    SSL_CTX_set_tlsext_servername_arg(ctx, state.get());
  }
  ERR_clear_error();
  return ContextAccess::wrap(std::move(state));
}

}  // namespace

Context::State::~State() {
  for (auto& entry : cache)
    SSL_SESSION_free(entry.second);
  SSL_CTX_free(ctx);
}

SSL_SESSION* Context::State::recall(std::string_view host) {
  std::lock_guard lock(cache_lock);
  for (auto& [name, session] : cache)
    if (name == host) {
      SSL_SESSION_up_ref(session);
      return session;
    }
  return nullptr;
}

void Context::State::remember(std::string host, SSL_SESSION* session) {
  std::lock_guard lock(cache_lock);
  for (auto it = cache.begin(); it != cache.end(); ++it)
    if (it->first == host) {
      SSL_SESSION_free(it->second);
      cache.erase(it);
      break;
    }
  while (cache.size() >= cache_capacity) {
    SSL_SESSION_free(cache.front().second);
    cache.pop_front();
  }
  cache.emplace_back(std::move(host), session);
}

Result<Context> Context::client() {
  return make(Role::client);
}
Result<Context> Context::server() {
  return make(Role::server);
}

Result<void> Context::use_certificate_chain_file(const std::string& path) {
  return check(SSL_CTX_use_certificate_chain_file(state_->ctx, path.c_str()));
}

Result<void> Context::use_private_key_file(const std::string& path) {
  return check(SSL_CTX_use_PrivateKey_file(state_->ctx, path.c_str(), SSL_FILETYPE_PEM));
}

Result<void> Context::use_certificate_chain(std::string_view pem) {
  auto bio = memory(pem);
  if (!bio) return detail::take_openssl_error();
  X509* leaf = PEM_read_bio_X509_AUX(bio.get(), nullptr, nullptr, nullptr);
  if (leaf == nullptr) return detail::take_openssl_error();
  const int ok = SSL_CTX_use_certificate(state_->ctx, leaf);
  X509_free(leaf);
  if (ok != 1) return detail::take_openssl_error();
  SSL_CTX_clear_chain_certs(state_->ctx);
  for (;;) {
    X509* next = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (next == nullptr) break;
    if (SSL_CTX_add0_chain_cert(state_->ctx, next) != 1) {  // add0: takes `next` on success
      X509_free(next);
      return detail::take_openssl_error();
    }
  }
  ERR_clear_error();  // the end of the text is reported as an error: not one
  return {};
}

Result<void> Context::use_private_key(std::string_view pem) {
  auto bio = memory(pem);
  if (!bio) return detail::take_openssl_error();
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) return detail::take_openssl_error();
  const int ok = SSL_CTX_use_PrivateKey(state_->ctx, key);
  EVP_PKEY_free(key);
  return check(ok);
}

Result<void> Context::load_ca_file(const std::string& path) {
  return check(SSL_CTX_load_verify_file(state_->ctx, path.c_str()));
}

Result<void> Context::load_ca(std::string_view pem) {
  auto bio = memory(pem);
  if (!bio) return detail::take_openssl_error();
  X509_STORE* store = SSL_CTX_get_cert_store(state_->ctx);
  int added = 0;
  for (;;) {
    X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (cert == nullptr) break;
    const int ok = X509_STORE_add_cert(store, cert);
    X509_free(cert);
    if (ok != 1) return detail::take_openssl_error();
    ++added;
  }
  if (added == 0) return detail::take_openssl_error();  // no certificate in the text
  ERR_clear_error();
  return {};
}

Result<void> Context::use_default_ca() {
  return check(SSL_CTX_set_default_verify_paths(state_->ctx));
}

void Context::set_verify(Verify mode) {
  int flags = SSL_VERIFY_NONE;
  if (mode == Verify::peer) flags = SSL_VERIFY_PEER;
  if (mode == Verify::require_peer) flags = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  SSL_CTX_set_verify(state_->ctx, flags, nullptr);
}

Result<void> Context::set_min_version(Version version) {
  return check(static_cast<int>(SSL_CTX_set_min_proto_version(
      state_->ctx, version == Version::tls1_3 ? TLS1_3_VERSION : TLS1_2_VERSION)));
}

Result<void> Context::set_ciphers(const std::string& tls12_list) {
  return check(SSL_CTX_set_cipher_list(state_->ctx, tls12_list.c_str()));
}

Result<void> Context::set_ciphersuites(const std::string& tls13_list) {
  return check(SSL_CTX_set_ciphersuites(state_->ctx, tls13_list.c_str()));
}

Result<void> Context::set_alpn(const std::vector<std::string>& protocols) {
  std::string wire;
  for (const auto& p : protocols) {
    if (p.empty() || p.size() > 255) return std::make_error_code(std::errc::invalid_argument);
    wire.push_back(static_cast<char>(p.size()));
    wire += p;
  }
  if (state_->role == Role::client) {
    // SSL_CTX_set_alpn_protos returns 0 on success, unlike the rest of the library.
    if (SSL_CTX_set_alpn_protos(state_->ctx, reinterpret_cast<const unsigned char*>(wire.data()),
                                static_cast<unsigned int>(wire.size())) != 0)
      return detail::take_openssl_error();
  }
  state_->alpn_wire = std::move(wire);
  return {};
}

void Context::on_server_name(std::function<const Context*(std::string_view)> choose) {
  state_->choose_by_name = std::move(choose);
}

void Context::enable_resumption(std::size_t capacity) {
  state_->cache_capacity = capacity;
  SSL_CTX_set_session_cache_mode(
      state_->ctx,
      capacity == 0 ? SSL_SESS_CACHE_OFF : SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
  SSL_CTX_sess_set_new_cb(state_->ctx, capacity == 0 ? nullptr : new_session);
}

Role Context::role() const noexcept {
  return state_->role;
}

ssl_ctx_st* Context::native_handle() const noexcept {
  return state_->ctx;
}

}  // namespace arbor::tls
