// musl's <sys/socket.h> as FreeBSD's differs from it where arbor's code looks, for
// scripts/darwin-check only. From FreeBSD 14's sys/sys/socket.h, which has SOCK_NONBLOCK,
// SOCK_CLOEXEC, accept4() and MSG_NOSIGNAL as Linux does.
#pragma once

#include_next <sys/socket.h>

// Linux's: FreeBSD's peer credentials come from LOCAL_PEERCRED (struct xucred).
#undef SO_PEERCRED

#define SO_NOSIGPIPE 0x00000800
