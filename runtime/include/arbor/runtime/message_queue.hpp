// The message stores behind arbor's channels: a fixed ring (bounded) and recycled blocks
// (unbounded). Neither is thread-safe: each channel guards its queue with its own lock.
//
// RingQueue<T>: `capacity` slots allocated once, at construction; push and pop move a message
// in and out of a slot and never allocate.
//
// SegmentQueue<T>: a linked list of blocks of kBlock slots. A block is allocated when the tail
// block is full, and a drained head block is kept as the spare (one) instead of being freed, so
// a queue whose length stays under a block's worth (the steady state of a consumer that keeps
// up) allocates nothing after its first block; a burst allocates one block per kBlock messages
// and frees all but the spare as it drains.
#pragma once

#include <cassert>
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

namespace arbor::detail {

template <class T>
class RingQueue {
 public:
  explicit RingQueue(std::size_t capacity)
      : slots_(std::make_unique<std::optional<T>[]>(capacity)), capacity_(capacity) {}

  bool empty() const noexcept { return size_ == 0; }
  bool full() const noexcept { return size_ == capacity_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return capacity_; }

  void push(T&& value) {
    assert(!full());
    slots_[tail_].emplace(std::move(value));
    tail_ = tail_ + 1 == capacity_ ? 0 : tail_ + 1;
    ++size_;
  }
  T pop() {
    assert(!empty());
    std::optional<T>& slot = slots_[head_];
    T value = std::move(*slot);
    slot.reset();
    head_ = head_ + 1 == capacity_ ? 0 : head_ + 1;
    --size_;
    return value;
  }
  void clear() noexcept {
    while (!empty())
      (void)pop();
  }

 private:
  std::unique_ptr<std::optional<T>[]> slots_;
  std::size_t capacity_;
  std::size_t head_ = 0, tail_ = 0, size_ = 0;
};

template <class T>
class SegmentQueue {
 public:
  static constexpr std::size_t kBlock = 32;

  explicit SegmentQueue(std::size_t = 0) {}
  SegmentQueue(const SegmentQueue&) = delete;
  ~SegmentQueue() {
    clear();
    delete head_;
    delete spare_;
  }

  bool empty() const noexcept { return size_ == 0; }
  bool full() const noexcept { return false; }
  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return static_cast<std::size_t>(-1); }

  void push(T&& value) {
    if (tail_ == nullptr) {
      head_ = tail_ = take_block();
    } else if (tail_index_ == kBlock) {
      tail_->next = take_block();
      tail_ = tail_->next;
      tail_index_ = 0;
    }
    tail_->slots[tail_index_].emplace(std::move(value));
    ++tail_index_;
    ++size_;
  }
  T pop() {
    assert(!empty());
    std::optional<T>& slot = head_->slots[head_index_];
    T value = std::move(*slot);
    slot.reset();
    ++head_index_;
    --size_;
    if (head_index_ == kBlock || size_ == 0) {
      if (head_ == tail_) {
        // Empty now: reuse the block in place from its start.
        head_index_ = tail_index_ = 0;
      } else {
        Block* drained = std::exchange(head_, head_->next);
        head_index_ = 0;
        recycle(drained);
      }
    }
    return value;
  }
  void clear() noexcept {
    while (!empty())
      (void)pop();
  }

 private:
  struct Block {
    std::optional<T> slots[kBlock];
    Block* next = nullptr;
  };
  Block* take_block() {
    if (Block* b = std::exchange(spare_, nullptr)) {
      b->next = nullptr;
      return b;
    }
    return new Block;
  }
  void recycle(Block* b) noexcept {
    if (spare_ == nullptr) {
      spare_ = b;
    } else {
      delete b;
    }
  }

  Block* head_ = nullptr;
  Block* tail_ = nullptr;
  Block* spare_ = nullptr;
  std::size_t head_index_ = 0, tail_index_ = 0, size_ = 0;
};

}  // namespace arbor::detail
