// The epoll engine: the readiness protocol (posix/readiness_engine.cpp) over an epoll set per
// poller. This file is only the adapter (posix/readiness_poller.hpp) and keeps its invariants:
// - A socket is added once with EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET: both directions,
//   edge-triggered, its descriptor's pointer as the report's token.
// - An eventfd, level-triggered with a null token, wakes the set; wait() drains it and never
//   reports it.
// - EPOLLHUP and EPOLLERR are reported as errors (both sides retry), EPOLLRDHUP and EPOLLPRI
//   as readable; EPOLLRDHUP, EPOLLPRI and EPOLLERR as a read side that stays readable
//   (Readiness::stays_readable), not EPOLLHUP, which a socket not yet connected reports too.
//   EPOLLPRI (urgent data) is watched for that alone: a receive stops short at the urgent mark
//   with bytes still queued behind it.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "arbor/io/socket.hpp"
#include "arbor/sync/timespec.hpp"
#include "common/engine_table.hpp"
#include "posix/readiness_engine.hpp"

namespace arbor::io {
namespace {

class EpollPoller final : public ReadinessPoller {
 public:
  static constexpr const char* kName = "epoll";
  explicit EpollPoller(std::size_t capacity) : events_(capacity) {}
  ~EpollPoller() override {
    close_handle(epfd_);
    close_handle(eventfd_);
  }

  int init() noexcept {
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) return errno;
    eventfd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (eventfd_ < 0) return errno;
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: drained on every wake
    ev.data.ptr = nullptr;
    return ::epoll_ctl(epfd_, EPOLL_CTL_ADD, eventfd_, &ev) == 0 ? 0 : errno;
  }

  int add(Handle fd, void* token) noexcept override {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET;
    ev.data.ptr = token;
    return ::epoll_ctl(epfd_, EPOLL_CTL_ADD, static_cast<int>(fd), &ev) == 0 ? 0 : errno;
  }

  void remove(Handle fd) noexcept override {
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, static_cast<int>(fd), nullptr);
  }

  std::size_t wait(std::int64_t timeout_ns, std::span<Readiness> out) noexcept override {
    const timespec ts = sync::to_timespec<timespec>(timeout_ns);
    const int n = ::epoll_pwait2(epfd_, events_.data(), static_cast<int>(out.size()),
                                 timeout_ns >= 0 ? &ts : nullptr, nullptr);
    std::size_t count = 0;
    for (int i = 0; i < n; ++i) {
      const epoll_event& ev = events_[static_cast<std::size_t>(i)];
      if (ev.data.ptr == nullptr) {
        std::uint64_t value;
        while (::read(eventfd_, &value, sizeof value) > 0) {
        }
        continue;
      }
      constexpr std::uint32_t kStays = EPOLLRDHUP | EPOLLPRI | EPOLLERR;
      out[count++] = {ev.data.ptr,
                      (ev.events & (EPOLLIN | EPOLLRDHUP | EPOLLPRI)) != 0,
                      (ev.events & EPOLLOUT) != 0,
                      (ev.events & (EPOLLHUP | EPOLLERR)) != 0,
                      0,
                      (ev.events & kStays) != 0};
    }
    return count;
  }

  void wake() noexcept override {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(eventfd_, &one, sizeof one);
  }

 private:
  int epfd_ = -1;
  int eventfd_ = -1;
  std::vector<epoll_event> events_;
};

}  // namespace

const EngineEntry kEpollEngine{"epoll", IoMode::workers, &probe_readiness<EpollPoller>,
                               &create_readiness<EpollPoller>};

}  // namespace arbor::io
