// ProvidedBuffers: one io_uring buffer ring (IORING_REGISTER_PBUF_RING) and the bookkeeping
// that moves its buffers between the kernel, sockets and the poller.
//
// A buffer's life: the kernel picks it for a multishot receive and names it in the CQE; the
// poller appends it to that socket's chunk list (UringDescriptor::chunk_head .. chunk_tail,
// under the descriptor's lock); whoever consumes the last byte of it gives it back. The poller
// owns the ring's tail, so only the poller puts buffers back into the ring: anyone else that
// consumes one pushes its id onto `returned` (a lock-free stack), and the poller takes the
// whole stack before it sleeps.
// Taking the whole stack at once (exchange) rather than popping is what makes the plain
// Treiber push safe without ABA tags.
//
// Per-buffer chunk state (`next`, `length`, `offset`) belongs to whichever socket holds the
// buffer and is guarded by that socket's lock; the hand-offs above (CQE → poller → lock →
// release-push → acquire-exchange) order every access.
//
// Only as many buffers circulate as the load needs. The kernel takes buffers from the ring in
// order, so with every buffer in it each one is written in turn and all of its memory stays
// resident (4 MiB a ring at 1024 x 4 KiB, however few connections ever had data at once). So
// the ring starts with kInitial buffers, and the poller, which counts what is left in the ring
// (each buffer CQE takes one, each recycle puts one back), adds as many again from the untouched
// rest when a quarter or less is left or a receive found the ring empty (-ENOBUFS, whose reader
// falls back to a single-shot receive meanwhile). It never shrinks: a buffer once touched is
// resident anyway, and the count is bounded by `count`.
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <system_error>

namespace arbor::io {

class ProvidedBuffers {
 public:
  static constexpr std::uint16_t kNone = 0xffff;
  static constexpr int kGroup = 0;

  ProvidedBuffers() = default;
  ProvidedBuffers(const ProvidedBuffers&) = delete;
  ProvidedBuffers& operator=(const ProvidedBuffers&) = delete;
  /// Frees the memory. Exiting the ring unregisters the buffer ring, so the ring must be gone
  /// (or have unregistered it) by then.
  ~ProvidedBuffers() = default;

  /// Registers `count` (a power of two ≤ 32768) buffers of `size` bytes with `ring`. An error
  /// means the kernel has no buffer rings; the caller falls back to single-shot receives.
  std::error_code init(io_uring& ring, unsigned count, unsigned size);

  std::byte* data(std::uint16_t id) const noexcept {
    return memory_.get() + std::size_t{id} * size_;
  }

  /// Any thread: give a consumed buffer back (the poller recycles it on its next wait).
  void give_back(std::uint16_t id) noexcept;
  /// Poller thread: put a buffer back into the ring (visible to the kernel after publish()).
  void recycle(std::uint16_t id) noexcept;
  /// Poller thread: a CQE took a buffer out of the ring (IORING_CQE_F_BUFFER).
  void taken() noexcept { --in_ring_; }
  /// Poller thread: a receive found the ring empty (-ENOBUFS).
  void starved() noexcept { starved_ = true; }
  /// Poller thread: recycle everything given back, add buffers if the ring runs low (see the
  /// file comment), then publish the ring's new tail.
  void publish() noexcept;

  /// The buffers the ring starts with.
  static constexpr unsigned kInitial = 64;
  /// Buffers put into circulation so far (kInitial up to `count`). Poller thread.
  unsigned circulating() const noexcept { return circulating_; }

  // Chunk state of a buffer held by a socket (guarded by that socket's lock).
  std::uint16_t& next(std::uint16_t id) noexcept { return chunks_[id].next; }
  std::uint32_t& length(std::uint16_t id) noexcept { return chunks_[id].length; }
  std::uint32_t& offset(std::uint16_t id) noexcept { return chunks_[id].offset; }

 private:
  struct Chunk {
    std::uint32_t length = 0;
    std::uint32_t offset = 0;
    std::uint16_t next = kNone;
    std::uint16_t returned_next = kNone;
  };
  struct FreePages {
    std::size_t bytes;
    void operator()(void* p) const noexcept;
  };

  io_uring_buf_ring* ring_ = nullptr;
  std::unique_ptr<void, FreePages> ring_memory_{nullptr, FreePages{0}};
  std::unique_ptr<std::byte[]> memory_;
  std::unique_ptr<Chunk[]> chunks_;
  unsigned count_ = 0;
  unsigned size_ = 0;
  unsigned staged_ = 0;  // added to the ring since the last publish
  // Poller thread only: ids [0, circulating_) have been put into the ring; in_ring_ of them
  // are in it now (staged ones included); starved_: a receive found it empty since the last
  // publish.
  unsigned circulating_ = 0;
  unsigned in_ring_ = 0;
  bool starved_ = false;
  // Given-back ids, newest first, as id + 1 (0 = empty).
  std::atomic<std::uint32_t> returned_{0};
};

}  // namespace arbor::io
