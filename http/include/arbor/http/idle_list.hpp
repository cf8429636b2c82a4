// IdleList: the server's connections that wait for their next request, least recently idle
// first, so that at --max-connections the oldest can be closed to admit a new one. Intrusive:
// the links live in the element (T::idle_prev, T::idle_next, T::idle_listed), so listing and
// unlisting cost O(1) and allocate nothing. Not thread-safe: the server guards it with its
// connections mutex. The list never owns its elements; an element must be removed before it
// is destroyed.
#pragma once

#include <cstddef>

namespace arbor::http {

template <class T>
class IdleList {
 public:
  bool empty() const noexcept { return oldest_ == nullptr; }
  std::size_t size() const noexcept { return size_; }

  /// Lists `n` as the newest. It must not be listed already.
  void push_newest(T& n) noexcept {
    n.idle_prev = newest_;
    n.idle_next = nullptr;
    n.idle_listed = true;
    if (newest_ != nullptr)
      newest_->idle_next = &n;
    else
      oldest_ = &n;
    newest_ = &n;
    ++size_;
  }

  /// Unlists `n` if it is listed.
  void remove(T& n) noexcept {
    if (!n.idle_listed) return;
    if (n.idle_prev != nullptr)
      n.idle_prev->idle_next = n.idle_next;
    else
      oldest_ = n.idle_next;
    if (n.idle_next != nullptr)
      n.idle_next->idle_prev = n.idle_prev;
    else
      newest_ = n.idle_prev;
    n.idle_prev = n.idle_next = nullptr;
    n.idle_listed = false;
    --size_;
  }

  /// Unlists and returns the oldest, or null if none.
  T* pop_oldest() noexcept {
    T* n = oldest_;
    if (n != nullptr) remove(*n);
    return n;
  }

 private:
  T* oldest_ = nullptr;
  T* newest_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace arbor::http
