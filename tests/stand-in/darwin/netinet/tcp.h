// musl's <netinet/tcp.h> as macOS's differs from it where arbor's code looks, for
// scripts/darwin-check only. From xnu's bsd/netinet/tcp.h.
#pragma once

#include_next <netinet/tcp.h>

// Keep-alive's idle time is TCP_KEEPALIVE on macOS; TCP_KEEPINTVL and TCP_KEEPCNT exist as on
// Linux.
#undef TCP_KEEPIDLE
#define TCP_KEEPALIVE 0x10
