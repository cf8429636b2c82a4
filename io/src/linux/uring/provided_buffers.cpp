#include "linux/uring/provided_buffers.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

namespace arbor::io {

void ProvidedBuffers::FreePages::operator()(void* p) const noexcept {
  ::munmap(p, bytes);
}

std::error_code ProvidedBuffers::init(io_uring& ring, unsigned count, unsigned size) {
  // The ring of buffer descriptors must be page-aligned memory the kernel maps too.
  const std::size_t bytes = count * sizeof(io_uring_buf);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (p == MAP_FAILED) return {errno, std::system_category()};
  ring_memory_ = std::unique_ptr<void, FreePages>(p, FreePages{bytes});
  try {
    // Not value-initialised: zeroing 4 MiB faulted in every page of it at once, a few ms of
    // each ring's set-up (most of a Runtime's creation on io_uring). Left as it is, the memory
    // (fresh pages from mmap, at this size) is faulted in page by page as the kernel first
    // receives into each buffer, once, off the steady state.
    memory_ = std::make_unique_for_overwrite<std::byte[]>(std::size_t{count} * size);
    chunks_ = std::make_unique<Chunk[]>(count);
  } catch (const std::bad_alloc&) {
    return std::make_error_code(std::errc::not_enough_memory);
  }
  auto* br = static_cast<io_uring_buf_ring*>(p);
  io_uring_buf_ring_init(br);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<std::uint64_t>(br);
  reg.ring_entries = count;
  reg.bgid = kGroup;
  if (int e = io_uring_register_buf_ring(&ring, &reg, 0); e < 0)
    return {-e, std::system_category()};
  ring_ = br;
  count_ = count;
  size_ = size;
  circulating_ = std::min(count, kInitial);
  for (unsigned id = 0; id < circulating_; ++id)
    recycle(static_cast<std::uint16_t>(id));
  publish();
  return {};
}

void ProvidedBuffers::give_back(std::uint16_t id) noexcept {
  std::uint32_t head = returned_.load(std::memory_order_relaxed);
  do {
    chunks_[id].returned_next = head == 0 ? kNone : static_cast<std::uint16_t>(head - 1);
    // release: the poller's acquire exchange sees returned_next and every read of the buffer.
  } while (!returned_.compare_exchange_weak(head, std::uint32_t{id} + 1u, std::memory_order_release,
                                            std::memory_order_relaxed));
}

void ProvidedBuffers::recycle(std::uint16_t id) noexcept {
  io_uring_buf_ring_add(ring_, data(id), size_, id, io_uring_buf_ring_mask(count_),
                        static_cast<int>(staged_));
  ++staged_;
  ++in_ring_;
}

void ProvidedBuffers::publish() noexcept {
  if (ring_ == nullptr) return;
  const std::uint32_t head = returned_.exchange(0, std::memory_order_acquire);
  for (std::uint16_t id = head == 0 ? kNone : static_cast<std::uint16_t>(head - 1); id != kNone;
       id = chunks_[id].returned_next)
    recycle(id);
  // Low (a quarter or less of what circulates is in the ring) or found empty: double what
  // circulates, from buffers never yet used. The ring holds `count_` entries, so it has room
  // for every buffer at once.
  // A starved ring that the given-back buffers just refilled to half needs nothing more: in
  // rings mode buffers read on other workers come back only at this poller's next wait.
  const bool low = in_ring_ <= circulating_ / 4 || (starved_ && in_ring_ <= circulating_ / 2);
  if (circulating_ < count_ && low) {
    const unsigned more = std::min(circulating_, count_ - circulating_);
    for (unsigned id = circulating_; id < circulating_ + more; ++id)
      recycle(static_cast<std::uint16_t>(id));
    circulating_ += more;
  }
  starved_ = false;
  if (staged_ == 0) return;
  io_uring_buf_ring_advance(ring_, static_cast<int>(staged_));  // a release store of the tail
  staged_ = 0;
}

}  // namespace arbor::io
