// UringEngine, workers and pollers modes (IoMode::workers, IoMode::pollers): one ring per
// poller thread, or one ring the scheduler's workers wait on in turn, whoever holds the poll
// right (the engine is the scheduler's Driver through EngineDriver). EngineCore::reap() wraps
// wait() with the timers (common/timer_plan.hpp).
//
// A pollers-mode ring is single-issuer where the kernel allows: its poller thread enables it
// before its first wait (on_poller_start()). The workers' ring is submitted to by whichever
// worker holds the poll right, so it cannot be (ring.cpp's set-up table says why cooperative).
#include <cstring>

#include "arbor/internal/log.hpp"
#include "arbor/sync/timespec.hpp"
#include "linux/uring/engine.hpp"

namespace arbor::io::uring {

std::size_t UringEngine::wait(int poller, std::int64_t timeout_ns,
                              std::span<sched::Event> out) noexcept {
  Ring& r = *rings_[static_cast<std::size_t>(poller)];
  post_wake_read(r);
  // Drain requests; announce sleep; drain again if something arrived meanwhile. A look that
  // will not sleep (a busy worker's) announces nothing: nobody need wake it.
  for (;;) {
    drain(r);
    r.buffers.publish();  // buffers workers gave back, before the kernel needs them
    if (timeout_ns == 0) break;
    r.sleeping.store(true, std::memory_order_seq_cst);
    if (r.incoming.load(std::memory_order_seq_cst) == nullptr) break;
    r.sleeping.store(false, std::memory_order_relaxed);
  }
  io_uring_cqe* cqe = nullptr;
  __kernel_timespec ts = sync::to_timespec<__kernel_timespec>(timeout_ns);
  if (io_uring_sq_ready(&r.ring) > 0) submits_.fetch_add(1, std::memory_order_relaxed);
  const int e =
      io_uring_submit_and_wait_timeout(&r.ring, &cqe, 1, timeout_ns >= 0 ? &ts : nullptr, nullptr);
  r.sleeping.store(false, std::memory_order_relaxed);
  if (wait_failed(e)) log::error("io_uring wait failed: {}", std::strerror(-e));
  return reap_cqes(r, out);
}

void UringEngine::on_poller_stop(int poller) noexcept {
  Ring& r = *rings_[static_cast<std::size_t>(poller)];
  drain(r);  // closes requested before stop() close their descriptors now
  io_uring_submit(&r.ring);
}

void UringEngine::on_poller_start(int poller) noexcept {
  // This poller thread becomes the ring's one issuer (single-issuer set-up).
  if (auto failed = rings_[static_cast<std::size_t>(poller)]->enable())
    log::error("io_uring: enabling the ring failed: {}", failed.message());
}

}  // namespace arbor::io::uring
