// Ring's mechanics: its set-up (a table of set-ups per io mode, tried in order), enabling a
// single-issuer ring on the thread that will submit to it, the wake read, and kick(). ring.hpp
// has the request queue's invariants.
#include "linux/uring/ring.hpp"

#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>

#include "arbor/internal/log.hpp"
#include "linux/uring/engine.hpp"

namespace arbor::io::uring {
namespace {

struct RingSetup {
  unsigned flags;
  const char* name;
};

// A dedicated poller's ring, preferred first: owned by one thread (single-issuer, enabled by
// that thread when it starts polling) with its completion work deferred to its waits; then
// progressively older set-ups.
constexpr RingSetup kPollerSetups[] = {
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN, "single-issuer, deferred task work"},
    {IORING_SETUP_COOP_TASKRUN, "cooperative task work"},
    {0, "basic"},
};

// A worker's own ring (rings mode), preferred first. Single-issuer with deferred task work:
// completions are worked off only when the owner enters the kernel to reap (no interrupts while
// it runs items), and TASKRUN_FLAG makes "is anything waiting?" one load of the SQ flags
// (WorkerRing::pending()). Then cooperative task work, which also spares the owner interrupts,
// then a basic ring (its CQEs appear in the CQ, which pending() also looks at).
constexpr RingSetup kWorkerRingSetups[] = {
    {IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
     "single-issuer, deferred task work, taskrun flag"},
    {IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG, "cooperative task work, taskrun flag"},
    {0, "basic"},
};

// Workers mode: the ring is submitted to by whichever worker holds the poll right, so it cannot
// be single-issuer, and the kernel runs a request's completion work (task work) on the thread
// that submitted it. Cooperative, because the basic set-up interrupts that thread for it (an IPI
// and a signal-style return into the kernel: 12.5 % of the server's samples in get_signal,
// docs/benchmarks.md), while this one lets it wait for the thread's next entry into the kernel:
// at once if it sleeps interruptibly (the kernel wakes it for the work, as it wakes it for a
// signal: a worker parked on the futex, or blocked in a BlockingRegion), at its next system call
// or timer tick if it runs in user space. So a completion for a busy worker's request waits at
// most a tick, never for its long item to end
// (WorkerPolling.ACompletionArrivesWhileItsSubmitterSleepsOnAFutex proves the sleeping case).
// With TASKRUN_FLAG, as a worker's own ring has it: the flag is what shows another thread that a
// submitter has completion work pending that no CQE shows yet, which a paused clock must not
// jump past (UringEngine::completions_ready(); BlockingRegionTest.APausedClockDoesNotJumpPast-
// APendingCompletion failed 7 of 30 in this mode under load without it). It is not enough on
// its own: the flag is per ring and any submitter that runs its own work clears it, while
// another's (a multishot receive's, on the worker that armed it, asleep on the scheduler's
// semaphore and woken by the kernel for it) still waits for a CPU. So a paused clock also
// nudges the sleepers through the kernel before it jumps (common/timer_plan.hpp; the test
// failed 8 of 400 runs with two copies at once before, 0 of 400 after). Its cost: the flag is
// per ring, so with liburing an empty look enters the kernel whenever any worker has work
// pending, and runs only its own (6-8 % more enters, measured when workers mode was the
// default; rings are io_uring's default now).
std::span<const RingSetup> ring_setups(IoMode mode) noexcept {
  switch (mode) {
    case IoMode::pollers:
      return kPollerSetups;
    case IoMode::workers:
      return std::span(kWorkerRingSetups).subspan(1);
    case IoMode::rings:
      break;
  }
  return kWorkerRingSetups;
}

}  // namespace

void Ring::report_submit_error(int e) noexcept {
  log::error("io_uring submit failed: {}", std::strerror(-e));
}

std::error_code check_ring(io_uring& ring, const io_uring_params& params) noexcept {
  constexpr unsigned kNeeded = IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG;
  if ((params.features & kNeeded) != kNeeded)
    return std::make_error_code(std::errc::function_not_supported);
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) return std::make_error_code(std::errc::function_not_supported);
  bool ok = true;
  for (int opcode :
       {IORING_OP_READ, IORING_OP_RECV, IORING_OP_SEND, IORING_OP_SENDMSG, IORING_OP_RECVMSG,
        IORING_OP_ACCEPT, IORING_OP_CONNECT, IORING_OP_ASYNC_CANCEL})
    ok = ok && io_uring_opcode_supported(probe, opcode);
  io_uring_free_probe(probe);
  return ok ? std::error_code{} : std::make_error_code(std::errc::function_not_supported);
}

void UringEngine::post_wake_read(Ring& r) noexcept {
  if (r.wake_read_posted) return;
  io_uring_sqe* sqe = r.get_sqe();
  io_uring_prep_read(sqe, r.eventfd, &r.eventfd_value, sizeof r.eventfd_value, 0);
  io_uring_sqe_set_data64(sqe, kWakeRead);
  r.wake_read_posted = true;
}

std::error_code UringEngine::set_up(Ring& r) noexcept {
  // Made with the ring, not at init(): a spare's ring (and so its eventfd) is made only if the
  // spare starts, so allowed spares cost no descriptor up front
  // (BlockingRegionTest.ManyAllowedSparesCostNoDescriptorsUntilTheyStart).
  if (r.eventfd < 0) {
    r.eventfd = ::eventfd(0, EFD_CLOEXEC);
    if (r.eventfd < 0) {
      const int error = errno;
      log::error("io_uring: ring {}'s eventfd cannot be made ({})", r.index, std::strerror(error));
      return {error, std::system_category()};
    }
  }
  int e = -EINVAL;
  for (const RingSetup& s : ring_setups(*options().io_mode)) {
    io_uring_params params{};
    // A single-issuer ring is made disabled: the thread that will submit to it enables it
    // (Ring::enable()), and the kernel makes whoever enables it its one issuer.
    const bool single_issuer = (s.flags & IORING_SETUP_SINGLE_ISSUER) != 0;
    params.flags = s.flags | IORING_SETUP_CLAMP | (single_issuer ? IORING_SETUP_R_DISABLED : 0u);
    e = io_uring_queue_init_params(options().ring_entries, &r.ring, &params);
    if (e < 0) continue;
    r.initialised = true;
    r.needs_enable = single_issuer;
    r.setup_name = s.name;
    if (auto missing = check_ring(r.ring, params)) return missing;
    break;
  }
  if (e < 0) {
    log::error("io_uring: ring {} cannot be set up ({})", r.index, std::strerror(-e));
    return {-e, std::system_category()};
  }
  if (options().multishot) {
    // Buffer rings (5.19) come with multishot accept; multishot receive (6.0) is checked by its
    // first use (-EINVAL turns it off). Without them no ring runs multishot operations: the
    // flags are the engine's, since a socket may move from ring to ring (rings mode).
    if (auto failed = r.buffers.init(r.ring, kBufferCount, kBufferSize)) {
      log::warn("io_uring: ring {} has no buffer ring ({}); single-shot operations", r.index,
                failed.message());
      multishot_accept_.store(false, std::memory_order_relaxed);
      multishot_receive_.store(false, std::memory_order_relaxed);
    }
  }
  return {};
}

std::error_code Ring::enable() noexcept {
  if (!needs_enable) return {};
  // Raw syscall: Debian's liburing 2.3 declares io_uring_enable_rings() but does not export it.
  if (::syscall(__NR_io_uring_register, ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0) < 0)
    return {errno, std::system_category()};
  needs_enable = false;
  return {};
}

void Ring::kick() noexcept {
  wake_if_sleeping(this);
  // seq_cst, after the push (itself seq_cst): pairs with close_ring()'s store of `retired`
  // before its last take of the queue, so a request is finished by one side or the other.
  if (state.load(std::memory_order_seq_cst) == State::retired) engine->finish_retired(*this);
}

}  // namespace arbor::io::uring
