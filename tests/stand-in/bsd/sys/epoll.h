// musl has <sys/epoll.h>; macOS and FreeBSD do not: including it off Linux must fail here too.
#error "<sys/epoll.h> is Linux's: macOS and FreeBSD have kqueue (io/src/bsd)"
