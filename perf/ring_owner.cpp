// Who may reap and submit on a ring that one thread set up (issue 11: can a worker run the
// completions of a busy worker's ring?). The owner creates a ring with each set-up, submits a
// receive and makes it complete; then another thread tries to wait for the CQE and to submit a
// NOP. Prints each result.
//
//   perf/ring_owner
#include <liburing.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

int main() {
  struct SetUp {
    unsigned flags;
    const char* name;
  };
  const SetUp setups[] = {
      {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
       "single-issuer, deferred task work"},
      {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN, "single-issuer, cooperative"},
      {IORING_SETUP_COOP_TASKRUN, "cooperative (arbor's shared ring)"},
  };
  for (const SetUp& s : setups) {
    io_uring ring{};
    io_uring_params params{};
    params.flags = s.flags;
    if (const int e = io_uring_queue_init_params(8, &ring, &params); e < 0) {
      std::printf("%-36s set-up failed: %s\n", s.name, std::strerror(-e));
      continue;
    }
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 1;
    char buffer[8];
    io_uring_prep_recv(io_uring_get_sqe(&ring), fds[0], buffer, sizeof buffer, 0);
    if (const int e = io_uring_submit(&ring); e != 1) {
      std::printf("%-36s owner's submit: %s\n", s.name, std::strerror(-e));
      return 1;
    }
    if (::write(fds[1], "x", 1) != 1) return 1;
    ::usleep(1000);  // the receive completes (its task work pending on the owner)
    std::thread other([&] {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts{0, 10'000'000};
      const int w = io_uring_wait_cqe_timeout(&ring, &cqe, &ts);
      io_uring_prep_nop(io_uring_get_sqe(&ring));
      const int n = io_uring_submit(&ring);
      std::printf("%-36s another thread: wait %s (%s), submit %s\n", s.name,
                  w < 0 ? std::strerror(-w) : "ok", cqe != nullptr ? "CQE seen" : "no CQE",
                  n < 0 ? std::strerror(-n) : "ok");
    });
    other.join();
    io_uring_queue_exit(&ring);
    ::close(fds[0]);
    ::close(fds[1]);
  }
  return 0;
}
