// Unix-domain sockets for tasks: UnixListener and UnixStream (a byte stream, as TcpStream) and
// UnixDatagram (datagrams, as UdpSocket), on filesystem paths or Linux abstract names.
//
//   auto path = *arbor::Address::unix_path("/run/app.sock");
//   auto listener = arbor::UnixListener::bind(rt, path);   // makes the file
//   auto stream = co_await listener->accept();               // a UnixStream
//   auto who = stream->peer_credentials();                   // {pid, uid, gid} (Linux)
//   ...
//   auto client = arbor::UnixStream::connect(rt, path);      // never waits
//
// A filesystem socket's file is made by bind and stays after close: removing it is the
// caller's (binding an existing path fails with address_in_use). Abstract names
// (Address::unix_abstract) make no file and go with the last socket bound to them.
// Platforms: Linux has all of it, on every engine. Windows (IOCP) has none of it: its AF_UNIX
// is stream-only, with no socketpair or credentials, and the engine's accept and connect are
// made for TCP, so every constructor here fails there with operation_not_supported.
#pragma once

#include <utility>

#include "arbor/address.hpp"
#include "arbor/io/engine.hpp"
#include "arbor/io/socket.hpp"
#include "arbor/result.hpp"
#include "arbor/runtime/datagram_socket.hpp"
#include "arbor/runtime/stream_socket.hpp"
#include "arbor/runtime/task.hpp"

namespace arbor {

class Runtime;

/// A connected Unix-domain stream. The reads, writes, shutdown and close are StreamSocket's.
class UnixStream : public StreamSocket {
 public:
  UnixStream() = default;
  /// Adopts an attached socket (what Engine::attach returns; UnixListener::accept uses it).
  UnixStream(io::Engine& engine, io::DescriptorRef socket) noexcept
      : StreamSocket(engine, socket) {}

  /// Connects to the listener at `address` (a Unix address). Never waits: a Unix connect is
  /// made or refused at once (no_such_file_or_directory for a missing path,
  /// connection_refused when nobody listens there, resource_unavailable_try_again when the
  /// listener's backlog is full).
  static Result<UnixStream> connect(Runtime& runtime, const Address& address) noexcept;
  /// Two streams connected to each other (socketpair), both attached to `runtime`'s engine.
  static Result<std::pair<UnixStream, UnixStream>> pair(Runtime& runtime) noexcept;

  /// The peer process as the kernel saw it connect (SO_PEERCRED; Linux only).
  Result<io::PeerCredentials> peer_credentials() const noexcept;
  Result<Address> local_address() const noexcept { return socket_.local_address(); }
  /// The peer's address: its path or name, or an unnamed address for a client that never
  /// bound (the usual case).
  Result<Address> peer_address() const noexcept { return peer(); }
};

/// A listening Unix-domain stream socket.
class UnixListener : public BasicSocket {
 public:
  UnixListener() = default;
  /// Binds `address` (a Unix address) and listens.
  static Result<UnixListener> bind(Runtime& runtime, const Address& address,
                                   int backlog = 1024) noexcept;
  /// The next connection (TcpListener::accept's behaviour: it rides out descriptor
  /// exhaustion; closing the listener ends it with operation_canceled).
  Task<Result<UnixStream>> accept(Address* peer = nullptr);
  Result<Address> local_address() const noexcept { return socket_.local_address(); }
  /// Closes now: connects are refused from its return; the file stays. Idempotent.
  void close() noexcept { socket_.close(); }

 private:
  UnixListener(io::Engine& engine, io::DescriptorRef socket) noexcept
      : BasicSocket(engine, socket) {}
};

/// A Unix-domain datagram socket. The sends and receives are DatagramSocket's.
class UnixDatagram : public DatagramSocket {
 public:
  UnixDatagram() = default;
  /// Bound to `address` (a Unix address): others can send_to it.
  static Result<UnixDatagram> bind(Runtime& runtime, const Address& address) noexcept;
  /// Not bound: it can send to a bound socket (send_to, or connect and send), but has no name
  /// a reply could be sent to; a client that wants replies binds a name of its own.
  static Result<UnixDatagram> unbound(Runtime& runtime) noexcept;
  /// Two datagram sockets connected to each other (socketpair).
  static Result<std::pair<UnixDatagram, UnixDatagram>> pair(Runtime& runtime) noexcept;
  /// The peer process (SO_PEERCRED): for a pair() socket; Linux only.
  Result<io::PeerCredentials> peer_credentials() const noexcept;

 private:
  UnixDatagram(io::Engine& engine, io::DescriptorRef socket) noexcept
      : DatagramSocket(engine, socket) {}
};

}  // namespace arbor
