// <sys/event.h> (kqueue) for scripts/darwin-check, which compiles against musl's headers, and
// musl has none. Only what io/src/bsd/kqueue_engine.cpp uses, with each platform's values and
// struct layout as its public header gives them: macOS's from xnu's bsd/sys/event.h, FreeBSD's
// from sys/sys/event.h (the layout of FreeBSD 12 and later, with ext[4]).
#ifndef ARBOR_STAND_IN_SYS_EVENT_H
#define ARBOR_STAND_IN_SYS_EVENT_H

#include <stdint.h>
#include <time.h>

#if defined(__APPLE__)
#pragma pack(4)
struct kevent {
  uintptr_t ident;
  int16_t filter;
  uint16_t flags;
  uint32_t fflags;
  intptr_t data;
  void* udata;
};
#pragma pack()
#define EVFILT_USER (-10)
#define EV_SET(kevp, a, b, c, d, e, f) \
  do {                                 \
    struct kevent* kev_ = (kevp);      \
    kev_->ident = (a);                 \
    kev_->filter = (b);                \
    kev_->flags = (c);                 \
    kev_->fflags = (d);                \
    kev_->data = (e);                  \
    kev_->udata = (f);                 \
  } while (0)
#elif defined(__FreeBSD__)
struct kevent {
  uintptr_t ident;
  short filter;
  unsigned short flags;
  unsigned int fflags;
  int64_t data;
  void* udata;
  uint64_t ext[4];
};
#define EVFILT_USER (-11)
#define EV_SET(kevp, a, b, c, d, e, f) \
  do {                                 \
    struct kevent* kev_ = (kevp);      \
    kev_->ident = (a);                 \
    kev_->filter = (b);                \
    kev_->flags = (c);                 \
    kev_->fflags = (d);                \
    kev_->data = (e);                  \
    kev_->udata = (f);                 \
    kev_->ext[0] = 0;                  \
    kev_->ext[1] = 0;                  \
    kev_->ext[2] = 0;                  \
    kev_->ext[3] = 0;                  \
  } while (0)
#else
#error "stand-in <sys/event.h>: for the macOS and FreeBSD targets only"
#endif

#define EVFILT_READ (-1)
#define EVFILT_WRITE (-2)
#define EV_ADD 0x0001
#define EV_DELETE 0x0002
#define EV_CLEAR 0x0020
#define EV_RECEIPT 0x0040  // the same value on FreeBSD and macOS
#define EV_ERROR 0x4000
#define EV_EOF 0x8000
#define NOTE_TRIGGER 0x01000000

#ifdef __cplusplus
extern "C" {
#endif
int kqueue(void);
int kevent(int kq, const struct kevent* changelist, int nchanges, struct kevent* eventlist,
           int nevents, const struct timespec* timeout);
#ifdef __cplusplus
}
#endif

#endif
