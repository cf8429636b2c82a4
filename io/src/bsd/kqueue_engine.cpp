// The kqueue engine (BSD, macOS; on Linux over libkqueue): the readiness protocol
// (posix/readiness_engine.cpp) over a kqueue per poller. This file is only the adapter
// (posix/readiness_poller.hpp) and keeps its invariants:
// - A socket gets EVFILT_READ and EVFILT_WRITE with EV_CLEAR (edge-triggered, as epoll's
//   EPOLLET), both in one kevent() call, its descriptor's pointer as udata. Each filter reports
//   one side; EV_EOF with a non-zero fflags (the socket's error) is reported as an error, so
//   both sides retry, as epoll's EPOLLERR does.
// - Both filters are deleted (EV_DELETE, one call) before the fd is closed: native kqueue drops
//   a closed fd's filters itself, libkqueue cannot see the close and would keep them for the fd
//   number's next socket.
// - Wakes are an EVFILT_USER event (ident kWakeIdent, EV_CLEAR, null udata) triggered with
//   NOTE_TRIGGER; wait() drops it.
// The changes are the protocol's only two (a socket's registration, its removal) and neither
// can wait for the next wait's kevent(): an add must be live before the first attempt parks
// (or its edge is lost while the poller sleeps), and a delete must precede the close (or it
// could reach the fd number's next socket). So each is one kevent() call, both filters at once.
// Over libkqueue (Linux) two of its differences from native kqueue are handled here, through
// bsd/libkqueue_quirks.hpp: the write filter watches a duplicate of the fd (WriteIdents), and
// the socket error libkqueue takes is handed to the engine (kTakesSocketError).
#include <sys/event.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "arbor/io/socket.hpp"
#include "arbor/sync/timespec.hpp"
#include "bsd/libkqueue_quirks.hpp"
#include "common/engine_table.hpp"
#include "posix/readiness_engine.hpp"

namespace arbor::io {
namespace {

constexpr std::uintptr_t kWakeIdent = 1;

class KqueuePoller final : public ReadinessPoller {
 public:
  static constexpr const char* kName = "kqueue";
  explicit KqueuePoller(std::size_t capacity) : events_(capacity) {}
  ~KqueuePoller() override { close_handle(kq_); }

  int init() noexcept {
    kq_ = ::kqueue();
    if (kq_ < 0) return errno;
    struct kevent wake;
    EV_SET(&wake, kWakeIdent, EVFILT_USER, EV_ADD | EV_CLEAR, 0, 0, nullptr);
    return change(&wake, 1);
  }

  int add(Handle fd, void* token) noexcept override {
    const int write_ident = write_idents_.open(fd);
    if (write_ident < 0) return -write_ident;
    struct kevent changes[2];
    EV_SET(&changes[0], static_cast<std::uintptr_t>(fd), EVFILT_READ, EV_ADD | EV_CLEAR, 0, 0,
           token);
    EV_SET(&changes[1], static_cast<std::uintptr_t>(write_ident), EVFILT_WRITE, EV_ADD | EV_CLEAR,
           0, 0, token);
    const int e = change(changes, 2);
    if (e != 0) remove(fd);  // a half-made registration, and the duplicate, go
    return e;
  }

  void remove(Handle fd) noexcept override {
    const int write_ident = write_idents_.take(fd);
    struct kevent changes[2];
    EV_SET(&changes[0], static_cast<std::uintptr_t>(fd), EVFILT_READ, EV_DELETE, 0, 0, nullptr);
    EV_SET(&changes[1], static_cast<std::uintptr_t>(write_ident), EVFILT_WRITE, EV_DELETE, 0, 0,
           nullptr);
    // EV_RECEIPT with room for both: each delete is tried even if the other fails (without it
    // kevent() stops at the first error, and a write filter left on the duplicate outlives it).
    changes[0].flags |= EV_RECEIPT;
    changes[1].flags |= EV_RECEIPT;
    struct kevent receipts[2];
    const timespec zero{};  // never waits: the two receipts fill the list
    (void)::kevent(kq_, changes, 2, receipts, 2, &zero);
    if (write_ident != static_cast<int>(fd)) close_handle(write_ident);
  }

  std::size_t wait(std::int64_t timeout_ns, std::span<Readiness> out) noexcept override {
    // At most a day: libkqueue turns a whole-millisecond timeout into epoll_wait()'s int
    // milliseconds unchecked (4294968 s waits 704 ms; 2147484 s for ever). The core re-plans.
    constexpr std::int64_t kMaxTimeoutNs = 86'400'000'000'000;
    const timespec ts = sync::to_timespec<timespec>(std::min(timeout_ns, kMaxTimeoutNs));
    const int n = ::kevent(kq_, nullptr, 0, events_.data(), static_cast<int>(out.size()),
                           timeout_ns >= 0 ? &ts : nullptr);
    std::size_t count = 0;
    for (int i = 0; i < n; ++i) {
      const struct kevent& ev = events_[static_cast<std::size_t>(i)];
      if (ev.filter == EVFILT_USER || (ev.flags & EV_ERROR) != 0) continue;
      const bool error = (ev.flags & EV_EOF) != 0 && ev.fflags != 0;
      // The read filter's EV_EOF: the peer's end, which stays readable (Readiness).
      const bool stays = error || (ev.filter == EVFILT_READ && (ev.flags & EV_EOF) != 0);
      out[count++] = {ev.udata,
                      ev.filter == EVFILT_READ,
                      ev.filter == EVFILT_WRITE,
                      error,
                      error ? kTakesSocketError * static_cast<int>(ev.fflags) : 0,
                      stays};
    }
    return count;
  }

  void wake() noexcept override {
    struct kevent trigger;
    EV_SET(&trigger, kWakeIdent, EVFILT_USER, 0, NOTE_TRIGGER, 0, nullptr);
    (void)change(&trigger, 1);
  }

 private:
  // Applies `count` changes now; 0 or the errno of the first that failed.
  int change(struct kevent* changes, int count) noexcept {
    return ::kevent(kq_, changes, count, nullptr, 0, nullptr) < 0 ? errno : 0;
  }

  int kq_ = -1;
  std::vector<struct kevent> events_;
  WriteIdents write_idents_;
};

}  // namespace

const EngineEntry kKqueueEngine{"kqueue", IoMode::workers, &probe_readiness<KqueuePoller>,
                                &create_readiness<KqueuePoller>};

}  // namespace arbor::io
