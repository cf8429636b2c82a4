// Operations and timers the engine tests share: a one-byte receive and a timer that record
// how they completed and count a Countdown down.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "../sched/test_support.hpp"
#include "arbor/io/engine.hpp"

namespace arbor::io::test {

struct Receive : Operation {
  std::byte byte{};
  std::atomic<int> completions{0};
  std::atomic<std::int64_t> last{0};
  sched::test::Countdown* done = nullptr;
  /// A one-byte receive on `d` that counts `counter` down when it completes.
  void prepare(DescriptorRef d, sched::test::Countdown& counter) noexcept {
    target(d);
    kind = OpKind::receive;
    data = &byte;
    size = 1;
    complete = &on_complete;
    done = &counter;
  }
  static void on_complete(Operation& op, std::int64_t result) noexcept {
    auto& self = static_cast<Receive&>(op);
    self.last = result;
    self.completions.fetch_add(1);
    self.done->count_down();
  }
};

struct Timed : Timer {
  std::atomic<int> fired{0};
  std::atomic<std::int64_t> result{1};
  std::atomic<std::int64_t> at{0};
  sched::test::Countdown* done = nullptr;
  static void on_event(const sched::Event& e, sched::Disposition) noexcept {
    auto* self = static_cast<Timed*>(static_cast<Timer*>(e.target));
    self->at = now_ns();
    self->result = e.result;
    self->fired.fetch_add(1);
    self->done->count_down();
  }
};

}  // namespace arbor::io::test
