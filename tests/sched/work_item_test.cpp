// sched::owner_of gets the owning object back from the WorkItem a work function receives, for
// both owner shapes it accepts: a class derived from WorkItem (any layout: library members,
// mixed access, the item not at offset 0) and a standard-layout class with the item first.
// A spawned task's promise is of the first kind (it holds a unique_ptr, not standard-layout
// under clang 14 with libstdc++ 12); the owners here are not standard-layout under any
// compiler, so a layout-only owner_of fails to compile this file.
#include "arbor/sched/work_item.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <type_traits>

namespace arbor::sched {
namespace {

struct Before {
  int padding[3] = {1, 2, 3};
};

// WorkItem is the second base, so it does not start the object: only a real base-to-derived
// cast (which adjusts the pointer) finds the owner.
class DerivedOwner : public Before, public WorkItem {
 public:
  DerivedOwner() noexcept : WorkItem(&run) {}
  static void run(WorkItem* self, Disposition disposition) noexcept {
    auto& owner = owner_of<DerivedOwner>(self);
    owner.seen = &owner;
    owner.disposition = disposition;
  }
  const DerivedOwner* seen = nullptr;
  Disposition disposition = Disposition::drop;
  std::unique_ptr<int> payload = std::make_unique<int>(7);

 private:
  [[maybe_unused]] int private_member_ =
      0;  // mixed access: not standard-layout, whatever the library does
};
static_assert(!std::is_standard_layout_v<DerivedOwner>);

struct MemberOwner {
  WorkItem item{&run};
  const MemberOwner* seen = nullptr;
  static void run(WorkItem* self, Disposition) noexcept {
    auto& owner = owner_of<MemberOwner>(self);
    owner.seen = &owner;
  }
};
static_assert(std::is_standard_layout_v<MemberOwner>);

TEST(WorkItemOwner, ADerivedOwnerOfAnyLayoutIsFoundEvenWhenTheItemIsNotAtItsStart) {
  DerivedOwner owner;
  WorkItem* item = &owner;
  ASSERT_NE(static_cast<void*>(item), static_cast<void*>(&owner))
      << "the item should sit after the first base, or this test shows nothing";
  item->fn(item, Disposition::run);
  EXPECT_EQ(owner.seen, &owner);
  EXPECT_EQ(owner.disposition, Disposition::run);
  EXPECT_EQ(*owner.payload, 7);
}

TEST(WorkItemOwner, AStandardLayoutOwnerWithTheItemFirstIsFound) {
  MemberOwner owner;
  owner.item.fn(&owner.item, Disposition::run);
  EXPECT_EQ(owner.seen, &owner);
}

}  // namespace
}  // namespace arbor::sched
