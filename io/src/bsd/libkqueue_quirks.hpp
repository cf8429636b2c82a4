// What the kqueue engine does differently over libkqueue (kqueue(2) emulated on Linux) than over
// a native kqueue, kept apart so that bsd/kqueue_engine.cpp reads as the native adapter. On the
// BSDs and macOS both are no-ops. docs/platforms.md ("kqueue on Linux") lists every difference.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "arbor/io/operation.hpp"

namespace arbor::io {

// libkqueue fills an EV_EOF event's fflags by reading SO_ERROR, which clears the socket's
// error: the connect or receive that retries would see none (a refused connect would look
// connected, a reset like an orderly end). So there the error is handed to the engine
// (Readiness::taken_error). Native kqueue reads so_error without clearing it.
#if defined(__linux__)
constexpr int kTakesSocketError = 1;
#else
constexpr int kTakesSocketError = 0;
#endif

#if defined(__linux__)
// libkqueue keeps an fd's two filters in one epoll registration and asks epoll_wait for as many
// events as the caller has room for kevents; an epoll event that is both readable and writable
// makes two kevents, and those that do not fit are dropped (linux/platform.c, "oos"). With
// EV_CLEAR (EPOLLET) a dropped edge never comes back and its operation waits forever
// (EngineTest.BurstIsDeliveredAsBoundedTreesExactlyOnce/kqueue lost completions so). Watching
// writes on a duplicate of the fd gives each filter its own epoll registration, so each epoll
// event makes one kevent and nothing is dropped. The duplicate is closed after its filter is
// deleted, before the fd itself closes. Costs an fd and two system calls per socket.
class WriteIdents {
 public:
  // The ident for fd's write filter (a new duplicate), or -errno.
  int open(Handle fd) noexcept {
    const int dup = ::fcntl(static_cast<int>(fd), F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return -errno;
    std::lock_guard guard(mutex_);
    try {
      if (dups_.size() <= static_cast<std::size_t>(fd))
        dups_.resize(static_cast<std::size_t>(fd) + 1, -1);
    } catch (const std::bad_alloc&) {
      ::close(dup);
      return -ENOMEM;
    }
    if (dups_[static_cast<std::size_t>(fd)] != -1) {  // fd is watched already: as epoll's EEXIST
      ::close(dup);
      return -EEXIST;
    }
    dups_[static_cast<std::size_t>(fd)] = dup;
    return dup;
  }
  // fd's write ident, forgotten; the caller closes it once its filter is deleted.
  int take(Handle fd) noexcept {
    std::lock_guard guard(mutex_);
    const auto i = static_cast<std::size_t>(fd);
    return i < dups_.size() ? std::exchange(dups_[i], -1) : -1;
  }

 private:
  std::mutex mutex_;
  std::vector<int> dups_;  // by fd number; grows to the largest fd watched, then stays
};
#else
// Native kqueue reports each filter on its own: the write filter watches the fd itself.
struct WriteIdents {
  static int open(Handle fd) noexcept { return static_cast<int>(fd); }
  static int take(Handle fd) noexcept { return static_cast<int>(fd); }
};
#endif

}  // namespace arbor::io
