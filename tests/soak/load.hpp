// The soak's load components. Each runs on a thread of its own until Context::stop, then closes
// every connection it opened before it returns, so once they are joined the server has no
// client left and its descriptors must go back to where they started.
#pragma once

#include "soak.hpp"

namespace arbor::soak {

/// requests.cpp: one connection issuing GET /plaintext and /json back to back, sometimes 16
/// pipelined; every response's status and body verified. Any other outcome (a wrong status or
/// body, an EOF or reset, a 10 s silence) is an error.
void keepalive_gets(Context& ctx, int index);

/// requests.cpp: Shape::idle keep-alive connections, one request each, then idle. Most are
/// revisited (a request, verified, on the same connection) every 40% of the idle timeout, and
/// must never be closed; Shape::idle_expire of them are left idle until the server closes them,
/// which it must within the idle timeout + a quarter (the sweeper's lateness) + 3 s, then
/// reconnect. A close of the former, or none of the latter in time, is an error.
void idle_connections(Context& ctx);

/// abuse.cpp: Shape::slowloris connections trickling a head one byte per 100 ms that never
/// ends; the server must cut each within the header timeout + a quarter + 3 s of its first byte
/// (a cut is counted, not an error; a connection still open past that is an error), and the
/// slot reconnects.
void slowloris(Context& ctx);

/// abuse.cpp: once a second, Shape::burst connections opened at once with a request each: half
/// plain GETs (verified), the rest closed with a reset (SO_LINGER 0) mid-request, mid-response
/// (pipelined GETs, the replies partly read) or mid-upload (a body partly sent). The plain ones
/// failing is an error; the reset ones only count.
void bursts(Context& ctx);

/// uploads.cpp: one connection from 127.0.0.2 (a peer of its own, so its body-buffer share is
/// not taken by the bursts' uploads from 127.0.0.1) POSTing bodies of random sizes and bytes
/// to /echo: small ones that fit the connection's input buffer, large ones (above 17 KiB, up to
/// 1 MiB) that take a shared body buffer, and chunked ones; each echo compared byte for byte.
void uploads(Context& ctx, int index);

}  // namespace arbor::soak
