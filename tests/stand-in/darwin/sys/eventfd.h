// musl has <sys/eventfd.h>; macOS does not: including it on the Apple targets must fail here too.
#error "<sys/eventfd.h> is Linux's (and FreeBSD's): the kqueue engine wakes with EVFILT_USER"
