// tls::detail::Machine: OpenSSL driven through a custom BIO over the machine's own buffers.
//
// Invariant: the BIO never blocks and never allocates. A read with nothing inbound asks to be
// retried (WANT_READ) unless the peer has ended its stream, which it reports as end of file
// so OpenSSL can tell truncation from a close_notify; a write that finds outbound full asks
// to be retried (WANT_WRITE). OpenSSL's error queue is emptied before every call, as
// SSL_get_error requires, and read (or cleared) after it.
#include "arbor/tls/machine.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstring>

#include "context_state.hpp"
#include "error_internal.hpp"

namespace arbor::tls {
namespace detail {

struct BioAccess {
  static Machine* of(BIO* bio) noexcept { return static_cast<Machine*>(BIO_get_data(bio)); }

  static int read(BIO* bio, char* out, std::size_t n, std::size_t* done) noexcept {
    BIO_clear_retry_flags(bio);
    Machine* m = of(bio);
    *done = m->bio_read(reinterpret_cast<std::byte*>(out), n);
    if (*done > 0) return 1;
    if (!m->eof_) BIO_set_retry_read(bio);
    return 0;
  }
  static int write(BIO* bio, const char* in, std::size_t n, std::size_t* done) noexcept {
    BIO_clear_retry_flags(bio);
    *done = of(bio)->bio_write(reinterpret_cast<const std::byte*>(in), n);
    if (*done > 0) return 1;
    BIO_set_retry_write(bio);
    return 0;
  }
  static long control(BIO* bio, int command, long, void*) noexcept {
    Machine* m = of(bio);
    switch (command) {
      case BIO_CTRL_FLUSH:
        return 1;  // the stream sends outbound() after every step
      case BIO_CTRL_EOF:
        return m->eof_ && m->in_begin_ == m->in_end_ ? 1 : 0;
      case BIO_CTRL_PENDING:
        return static_cast<long>(m->in_end_ - m->in_begin_);
      case BIO_CTRL_WPENDING:
        return static_cast<long>(m->out_end_ - m->out_begin_);
      default:
        return 0;
    }
  }
  static int create(BIO* bio) noexcept {
    BIO_set_init(bio, 1);
    return 1;
  }
  static int destroy(BIO*) noexcept { return 1; }

  static const BIO_METHOD* method() noexcept {
    // Made once, on first use, shared by every machine (a BIO_METHOD is read-only once made).
    static BIO_METHOD* const method = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "arbor");
      if (m == nullptr) return m;
      BIO_meth_set_read_ex(m, read);
      BIO_meth_set_write_ex(m, write);
      BIO_meth_set_ctrl(m, control);
      BIO_meth_set_create(m, create);
      BIO_meth_set_destroy(m, destroy);
      return m;
    }();
    return method;
  }
};

const std::string* host_of(const SSL* ssl) noexcept {
  const auto* m = static_cast<const Machine*>(SSL_get_app_data(ssl));
  return m == nullptr ? nullptr : &m->host();
}

Result<std::unique_ptr<Machine>> Machine::make(const Context& context, std::string_view host) {
  ERR_clear_error();
  std::unique_ptr<Machine> m(new Machine);
  m->context_ = context.state();
  m->host_ = host;
  m->buffer_ = std::make_unique_for_overwrite<std::byte[]>(kInbound + kOutbound);
  const BIO_METHOD* method = BioAccess::method();
  if (method == nullptr) return take_openssl_error();
  m->ssl_ = SSL_new(context.native_handle());
  if (m->ssl_ == nullptr) return take_openssl_error();
  SSL_set_app_data(m->ssl_, m.get());
  BIO* bio = BIO_new(method);
  if (bio == nullptr) return take_openssl_error();
  BIO_set_data(bio, m.get());
  SSL_set_bio(m->ssl_, bio, bio);  // one reference, for both directions: the SSL owns it
  if (context.role() == Role::server) {
    SSL_set_accept_state(m->ssl_);
    return m;
  }
  SSL_set_connect_state(m->ssl_);
  if (!m->host_.empty()) {
    // An IP address is checked as one (RFC 6066 forbids it as SNI); a name is sent as SNI
    // and checked against the certificate's names.
    ASN1_OCTET_STRING* ip = a2i_IPADDRESS(m->host_.c_str());
    if (ip != nullptr) {
      ASN1_OCTET_STRING_free(ip);
      if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(m->ssl_), m->host_.c_str()) != 1)
        return take_openssl_error();
    } else if (SSL_set_tlsext_host_name(m->ssl_, m->host_.c_str()) != 1 ||
               SSL_set1_host(m->ssl_, m->host_.c_str()) != 1) {
      return take_openssl_error();
    }
    if (SSL_SESSION* session = m->context_->recall(m->host_)) {
      SSL_set_session(m->ssl_, session);  // takes its own reference
      SSL_SESSION_free(session);
    }
  }
  ERR_clear_error();
  return m;
}

Machine::~Machine() {
  SSL_free(ssl_);  // frees the BIO too
}

std::size_t Machine::bio_read(std::byte* out, std::size_t n) noexcept {
  const std::size_t k = std::min(n, in_end_ - in_begin_);
  std::memcpy(out, buffer_.get() + in_begin_, k);
  in_begin_ += k;
  if (in_begin_ == in_end_) in_begin_ = in_end_ = 0;
  return k;
}

std::size_t Machine::bio_write(const std::byte* in, std::size_t n) noexcept {
  if (kOutbound - out_end_ < n && out_begin_ > 0) {
    // Rare: a record arrives while part of the last is still unsent.
    std::memmove(buffer_.get() + kInbound, buffer_.get() + kInbound + out_begin_,
                 out_end_ - out_begin_);
    out_end_ -= out_begin_;
    out_begin_ = 0;
  }
  const std::size_t k = std::min(n, kOutbound - out_end_);
  std::memcpy(buffer_.get() + kInbound + out_end_, in, k);
  out_end_ += k;
  return k;
}

std::span<std::byte> Machine::inbound_space() noexcept {
  // OpenSSL asks for more only when inbound is empty (it reads what a record needs from what
  // is there), so the whole buffer is free whenever this is called after Want::read.
  if (in_begin_ > 0 && in_begin_ < in_end_) {
    std::memmove(buffer_.get(), buffer_.get() + in_begin_, in_end_ - in_begin_);
    in_end_ -= in_begin_;
    in_begin_ = 0;
  }
  return {buffer_.get() + in_end_, kInbound - in_end_};
}

void Machine::received(std::size_t n) noexcept {
  if (n == 0) eof_ = true;
  in_end_ += n;
}

void Machine::sent(std::size_t n) noexcept {
  out_begin_ += n;
  if (out_begin_ >= out_end_) out_begin_ = out_end_ = 0;
}

bool Machine::has_buffered_input() const noexcept {
  return in_end_ > in_begin_ || SSL_has_pending(ssl_) == 1;
}

std::error_code Machine::classify(int ret) noexcept {
  const int kind = SSL_get_error(ssl_, ret);
  if (kind == SSL_ERROR_SYSCALL) {
    // Our BIO has no errno: a failed call that is neither OpenSSL's nor a retry is the peer
    // ending its stream mid-record or mid-handshake.
    ERR_clear_error();
    return make_error_code(Errc::truncated);
  }
  const unsigned long e = ERR_peek_last_error();
  if (ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    ERR_clear_error();
    return make_error_code(Errc::truncated);
  }
  if (ERR_GET_LIB(e) == ERR_LIB_SSL && ERR_GET_REASON(e) == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    const long result = SSL_get_verify_result(ssl_);
    if (result != X509_V_OK) {
      ERR_clear_error();
      return verify_failure(result);
    }
  }
  return take_openssl_error();
}

Machine::Step Machine::step(Op op, std::span<std::byte> data) noexcept {
  if (broken_) return {Want::failed, 0, make_error_code(Errc::not_usable)};
  ERR_clear_error();
  std::size_t n = 0;
  int ret = 0;
  switch (op) {
    case Op::handshake:
      ret = SSL_do_handshake(ssl_);
      break;
    case Op::read:
      ret = SSL_read_ex(ssl_, data.data(), data.size(), &n);
      break;
    case Op::write:
      ret = SSL_write_ex(ssl_, data.data(), data.size(), &n);
      break;
    case Op::shutdown:
      // 0: our close_notify is out, the peer's not yet read (we do not wait for it);
      // 1: both are. Either way this side is done.
      ret = SSL_shutdown(ssl_);
      if (ret == 0) ret = 1;
      break;
  }
  if (ret == 1) return {Want::done, n, {}};
  const int kind = SSL_get_error(ssl_, ret);
  if (kind == SSL_ERROR_WANT_READ) return {Want::read, 0, {}};
  if (kind == SSL_ERROR_WANT_WRITE) return {Want::write, 0, {}};
  if (kind == SSL_ERROR_ZERO_RETURN && op == Op::read) {
    ERR_clear_error();
    return {Want::done, 0, {}};  // the peer's close_notify: the end of the stream
  }
  broken_ = true;
  return {Want::failed, 0, classify(ret)};
}

std::string_view Machine::alpn() const noexcept {
  const unsigned char* data = nullptr;
  unsigned int size = 0;
  SSL_get0_alpn_selected(ssl_, &data, &size);
  return {reinterpret_cast<const char*>(data), size};
}

std::string_view Machine::server_name() const noexcept {
  const char* name = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name);
  return name == nullptr ? std::string_view() : std::string_view(name);
}

std::string_view Machine::version() const noexcept {
  return SSL_get_version(ssl_);
}

bool Machine::resumed() const noexcept {
  return SSL_session_reused(ssl_) == 1;
}

}  // namespace detail
}  // namespace arbor::tls
