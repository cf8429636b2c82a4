// TailHistory grants "short" only on evidence: what the wake deferral relies on.
#include "tail_history.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace arbor::sched::detail {
namespace {

using Habit = TailHistory::Habit;

constexpr std::uint64_t kThreshold = 1000;
constexpr std::uint64_t kCap = 4 * kThreshold;

TEST(TailHistory, AnItemNeverRecordedIsUnknownNotShort) {
  TailHistory h;
  WorkItem a(nullptr), b(nullptr);
  EXPECT_EQ(h.habit(&a, kThreshold), Habit::unknown);
  h.record(&a, 10, kCap);
  EXPECT_EQ(h.habit(&a, kThreshold), Habit::short_tail);
  EXPECT_EQ(h.habit(&b, kThreshold), Habit::unknown) << "another item's entry is not b's";
}

TEST(TailHistory, AnItemWhoseSlotWasTakenIsUnknownAgain) {
  TailHistory h;
  // Items 16 bytes apart in a block big enough to wrap the table: some pair shares a slot.
  std::vector<WorkItem> items(4096, WorkItem(nullptr));
  WorkItem* first = &items[0];
  h.record(first, 10, kCap);
  int evicted_by = -1;
  for (int i = 1; i < 4096 && evicted_by < 0; ++i) {
    h.record(&items[i], 10, kCap);
    if (h.habit(first, kThreshold) == Habit::unknown) evicted_by = i;
  }
  ASSERT_GE(evicted_by, 1) << "32 slots cannot hold 4096 items";
  EXPECT_EQ(h.habit(&items[evicted_by], kThreshold), Habit::short_tail);
}

TEST(TailHistory, ALongTailIsLongAtOnceAndStaysLongWhileItLasts) {
  TailHistory h;
  WorkItem a(nullptr);
  for (int i = 0; i < 10; ++i)
    h.record(&a, 10, kCap);
  ASSERT_EQ(h.habit(&a, kThreshold), Habit::short_tail);
  h.record(&a, 20'000'000, kCap);  // one run that kept going (e.g. blocked for ms)
  EXPECT_EQ(h.habit(&a, kThreshold), Habit::long_tail) << "one long run must end the deferral";
  for (int i = 0; i < 100; ++i) {
    h.record(&a, 20'000'000, kCap);
    ASSERT_EQ(h.habit(&a, kThreshold), Habit::long_tail) << "run " << i;
  }
}

TEST(TailHistory, TheCapLetsAShortItemRecoverFromOneOutlierWithinAFewSamples) {
  TailHistory h;
  WorkItem a(nullptr);
  for (int i = 0; i < 10; ++i)
    h.record(&a, 10, kCap);
  h.record(&a, 50'000'000, kCap);  // a preemption inside the tail
  int samples = 0;
  while (h.habit(&a, kThreshold) != Habit::short_tail && samples < 100) {
    h.record(&a, 10, kCap);
    ++samples;
  }
  // Uncapped, the average (halved by each short sample) would need about 15 short samples to
  // fall under the threshold; capped at 4x the threshold it needs two.
  EXPECT_EQ(samples, 2);
}

TEST(TailHistory, TheThresholdIsTheCallers) {
  TailHistory h;
  WorkItem a(nullptr);
  h.record(&a, 700, kCap);
  EXPECT_EQ(h.habit(&a, 1000), Habit::short_tail);  // e.g. a prefer_local item
  EXPECT_EQ(h.habit(&a, 500), Habit::long_tail);    // e.g. a global item
}

}  // namespace
}  // namespace arbor::sched::detail
