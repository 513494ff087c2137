#include "kernel/pmu_arbiter/intrusive_ring.h"

#include <vector>

#include "gtest/gtest.h"

namespace pfm {
namespace {

// A node on two rings at once.
struct Node {
  explicit Node(int v) : value(v) {}
  int value;
  RingLinks<Node> in_a;
  RingLinks<Node> in_b;
};

using RingA = IntrusiveRing<Node, &Node::in_a>;
using RingB = IntrusiveRing<Node, &Node::in_b>;

// Values from the front, once round; checks the links both ways.
template <typename Ring>
std::vector<int> Values(const Ring& ring) {
  std::vector<int> out;
  if (ring.empty()) return out;
  Node* n = ring.front();
  do {
    out.push_back(n->value);
    EXPECT_EQ(Ring::Prev(Ring::Next(n)), n);
    n = Ring::Next(n);
  } while (n != ring.front() && out.size() < 100);
  return out;
}

using V = std::vector<int>;

TEST(IntrusiveRingTest, PushBackKeepsOrderAndFront) {
  Node n1(1), n2(2), n3(3);
  RingA a;
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.back(), nullptr);
  a.PushBack(&n1);
  EXPECT_EQ(a.front(), &n1);
  EXPECT_EQ(RingA::Next(&n1), &n1);
  a.PushBack(&n2);
  a.PushBack(&n3);
  EXPECT_EQ(Values(a), (V{1, 2, 3}));
  EXPECT_EQ(a.back(), &n3);
}

TEST(IntrusiveRingTest, RemoveMovesTheFrontAndClearsLinks) {
  Node n1(1), n2(2), n3(3);
  RingA a;
  for (Node* n : {&n1, &n2, &n3}) a.PushBack(n);
  a.Remove(&n2);
  EXPECT_EQ(Values(a), (V{1, 3}));
  EXPECT_EQ(n2.in_a.next, nullptr);
  EXPECT_EQ(n2.in_a.prev, nullptr);
  a.Remove(&n1);  // the front: the next one is
  EXPECT_EQ(a.front(), &n3);
  EXPECT_EQ(Values(a), (V{3}));
  a.Remove(&n3);
  EXPECT_TRUE(a.empty());
  // Removed nodes can join again.
  a.PushBack(&n2);
  a.PushBack(&n1);
  EXPECT_EQ(Values(a), (V{2, 1}));
}

TEST(IntrusiveRingTest, MoveToBackAndStart) {
  Node n1(1), n2(2), n3(3), n4(4);
  RingA a;
  for (Node* n : {&n1, &n2, &n3, &n4}) a.PushBack(n);
  a.MoveToBack(&n2);
  EXPECT_EQ(Values(a), (V{1, 3, 4, 2}));
  a.MoveToBack(&n2);  // already last
  EXPECT_EQ(Values(a), (V{1, 3, 4, 2}));
  a.MoveToBack(&n1);  // the front: the ring turns
  EXPECT_EQ(Values(a), (V{3, 4, 2, 1}));
  a.StartAt(&n2);
  EXPECT_EQ(Values(a), (V{2, 1, 3, 4}));
  a.StartAfter(&n4);
  EXPECT_EQ(Values(a), (V{2, 1, 3, 4}));
  a.StartAfter(&n2);
  EXPECT_EQ(Values(a), (V{1, 3, 4, 2}));
}

TEST(IntrusiveRingTest, UnhideInReverseOrderRestoresTheRing) {
  Node n[5] = {Node(0), Node(1), Node(2), Node(3), Node(4)};
  RingA a;
  for (Node& x : n) a.PushBack(&x);
  // Walk, hiding as we go (what a deal does with exhausted sessions).
  RingA::Hide(&n[1]);
  RingA::Hide(&n[2]);  // next to a hidden one
  RingA::Hide(&n[4]);
  EXPECT_EQ(RingA::Next(&n[0]), &n[3]);
  EXPECT_EQ(RingA::Next(&n[3]), &n[0]);
  EXPECT_EQ(RingA::Prev(&n[0]), &n[3]);
  // A hidden node keeps its own links.
  EXPECT_EQ(RingA::Next(&n[2]), &n[3]);
  RingA::Unhide(&n[4]);
  RingA::Unhide(&n[2]);
  RingA::Unhide(&n[1]);
  EXPECT_EQ(Values(a), (V{0, 1, 2, 3, 4}));
}

TEST(IntrusiveRingTest, ANodeIsOnTwoRingsIndependently) {
  Node n1(1), n2(2), n3(3);
  RingA a;
  RingB b;
  for (Node* n : {&n1, &n2, &n3}) a.PushBack(n);
  for (Node* n : {&n3, &n1}) b.PushBack(n);
  a.MoveToBack(&n1);
  b.Remove(&n3);
  EXPECT_EQ(Values(a), (V{2, 3, 1}));
  EXPECT_EQ(Values(b), (V{1}));
}

}  // namespace
}  // namespace pfm
