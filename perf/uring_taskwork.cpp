// How long a completion waits when the thread that submitted its request is not the one
// waiting in the ring: the question behind io_uring's workers mode (docs/architecture.md,
// "UringEngine"). One thread submits a receive on a socket pair and then sleeps on a futex,
// sleeps in nanosleep, or spins in user space with no system call; another waits in the ring;
// the main thread writes one byte and times until the waiter holds the CQE. io_uring runs the
// request's completion work on its submitter, so the answer depends on how the ring tells that
// thread: a basic ring interrupts it, a cooperative one (COOP_TASKRUN) does not.
//
//   perf/uring_taskwork [RUNS]    (default 5; prints each run's microseconds per set-up)
#include <liburing.h>
#include <linux/futex.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

enum class Submitter { futex, nanosleep, spin };

const char* name(Submitter s) {
  switch (s) {
    case Submitter::futex:
      return "sleeps in futex_wait";
    case Submitter::nanosleep:
      return "sleeps in nanosleep";
    case Submitter::spin:
      return "spins in user space";
  }
  return "?";
}

// Microseconds from the write to the waiter holding the CQE; negative on an error (printed).
double one_run(Submitter how, unsigned flags) {
  io_uring ring{};
  io_uring_params params{};
  params.flags = flags;
  if (int e = io_uring_queue_init_params(8, &ring, &params); e < 0) {
    std::fprintf(stderr, "io_uring_queue_init_params: %s\n", std::strerror(-e));
    return -1;
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    std::perror("socketpair");
    io_uring_queue_exit(&ring);
    return -1;
  }
  char buffer[16];
  std::atomic<bool> submitted{false}, stop{false};
  std::atomic<int> submit_result{0};
  std::atomic<std::uint32_t> word{0};  // never woken: the futex sleep ends by its timeout
  std::thread submitter([&] {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_recv(sqe, fds[0], buffer, sizeof buffer, 0);
    submit_result = io_uring_submit(&ring);
    submitted = true;
    const auto until = Clock::now() + std::chrono::milliseconds(300);
    switch (how) {
      case Submitter::futex: {
        timespec timeout{0, 300'000'000};
        ::syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, &timeout, nullptr, 0);
        break;
      }
      case Submitter::nanosleep: {
        timespec timeout{0, 300'000'000};
        while (::nanosleep(&timeout, &timeout) != 0) {
        }
        break;
      }
      case Submitter::spin:
        while (!stop.load(std::memory_order_relaxed) && Clock::now() < until) {
        }
        break;
    }
  });
  while (!submitted)
    std::this_thread::yield();
  double micros = -1;
  if (submit_result != 1) {
    std::fprintf(stderr, "io_uring_submit: %d\n", submit_result.load());
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the submitter settles
    const auto start = Clock::now();
    if (::write(fds[1], "x", 1) != 1) std::perror("write");
    io_uring_cqe* cqe = nullptr;
    __kernel_timespec timeout{1, 0};
    const int e = io_uring_wait_cqe_timeout(&ring, &cqe, &timeout);
    if (e == 0 && cqe->res == 1) {
      micros = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    } else {
      std::fprintf(stderr, "wait: %s, res %d\n", std::strerror(-e), e == 0 ? cqe->res : 0);
    }
  }
  stop = true;
  submitter.join();
  ::close(fds[0]);
  ::close(fds[1]);
  io_uring_queue_exit(&ring);
  return micros;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  if (runs < 1) {
    std::fprintf(stderr, "usage: %s [RUNS >= 1]\n", argv[0]);
    return 2;
  }
  struct SetUp {
    const char* name;
    unsigned flags;
  };
  const SetUp setups[] = {{"basic", 0}, {"cooperative", IORING_SETUP_COOP_TASKRUN}};
  for (Submitter how : {Submitter::futex, Submitter::nanosleep, Submitter::spin}) {
    for (const SetUp& s : setups) {
      std::vector<double> us;
      for (int i = 0; i < runs; ++i)
        us.push_back(one_run(how, s.flags));
      std::printf("submitter %-22s ring %-12s us:", name(how), s.name);
      for (double u : us)
        std::printf(" %.1f", u);
      std::sort(us.begin(), us.end());
      std::printf("  (median %.1f)\n", us[us.size() / 2]);
    }
  }
  return 0;
}
