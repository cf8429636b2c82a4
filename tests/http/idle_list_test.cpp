// IdleList: the intrusive LRU of idle connections that eviction at --max-connections takes the
// oldest from.
#include "arbor/http/idle_list.hpp"

#include <gtest/gtest.h>

namespace arbor::http {
namespace {

struct Node {
  int id = 0;
  Node* idle_prev = nullptr;
  Node* idle_next = nullptr;
  bool idle_listed = false;
};

TEST(IdleList, PopsTheLeastRecentlyListedFirst) {
  Node n[4] = {{1}, {2}, {3}, {4}};
  IdleList<Node> list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.pop_oldest(), nullptr);
  for (Node& x : n)
    list.push_newest(x);
  EXPECT_EQ(list.size(), 4u);
  // 2 becomes busy and idle again: now the newest.
  list.remove(n[1]);
  EXPECT_FALSE(n[1].idle_listed);
  list.push_newest(n[1]);
  // 3 leaves for good (its connection ended).
  list.remove(n[2]);
  list.remove(n[2]);  // not listed any more: a no-op
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(list.pop_oldest()->id, 1);
  EXPECT_EQ(list.pop_oldest()->id, 4);
  EXPECT_EQ(list.pop_oldest()->id, 2);
  EXPECT_EQ(list.pop_oldest(), nullptr);
  EXPECT_TRUE(list.empty());
  for (const Node& x : n)
    EXPECT_FALSE(x.idle_listed);
}

TEST(IdleList, RemovingTheOnlyAndTheEndsKeepsItConsistent) {
  Node a{1}, b{2}, c{3};
  IdleList<Node> list;
  list.push_newest(a);
  list.remove(a);
  EXPECT_TRUE(list.empty());
  list.push_newest(a);
  list.push_newest(b);
  list.push_newest(c);
  list.remove(c);  // the newest
  list.remove(a);  // the oldest
  EXPECT_EQ(list.size(), 1u);
  list.push_newest(a);
  EXPECT_EQ(list.pop_oldest()->id, 2);
  EXPECT_EQ(list.pop_oldest()->id, 1);
  EXPECT_TRUE(list.empty());
}

}  // namespace
}  // namespace arbor::http
