// musl's <sys/socket.h> as macOS's differs from it where arbor's code looks, for
// scripts/darwin-check only. From xnu's bsd/sys/socket.h, macOS 11 and later.
#pragma once

#include_next <sys/socket.h>

// Linux's, not macOS's: no socket-type flags (O_NONBLOCK and FD_CLOEXEC go through fcntl()),
// no accept4(), and peer credentials come from LOCAL_PEERCRED, not SO_PEERCRED.
#undef SOCK_NONBLOCK
#undef SOCK_CLOEXEC
#undef SO_PEERCRED
#pragma GCC poison accept4

// macOS's own. MSG_NOSIGNAL is public (and honoured by the kernel) from macOS 11 on; SO_LINGER
// takes clock ticks there and SO_LINGER_SEC seconds.
#undef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0x80000
#define SO_NOSIGPIPE 0x1022
#define SO_LINGER_SEC 0x1080
