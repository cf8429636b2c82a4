// The platform's socket-address declarations in one place: sockaddr_in, sockaddr_in6,
// inet_pton, inet_ntop, htons and friends. Their names and layouts are the same on POSIX and
// Winsock, so the code that uses them (Address) is shared; only the headers differ.
#pragma once

#if defined(_WIN32)
// winsock2.h before anything that includes windows.h, which would otherwise pull in the old
// winsock.h and clash with it.
#include <winsock2.h>
#include <ws2tcpip.h>
// afunix.h after winsock2.h (it uses ADDRESS_FAMILY)
#include <afunix.h>
#else
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#endif
