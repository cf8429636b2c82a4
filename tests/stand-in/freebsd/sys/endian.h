// What libc++'s <__config> reads of FreeBSD's <sys/endian.h> (the byte order), for
// scripts/darwin-check only; the byte-swapping functions are not declared.
#pragma once

#define _LITTLE_ENDIAN 1234
#define _BIG_ENDIAN 4321
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define _BYTE_ORDER _LITTLE_ENDIAN
#else
#define _BYTE_ORDER _BIG_ENDIAN
#endif
