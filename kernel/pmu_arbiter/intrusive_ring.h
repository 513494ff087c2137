// IntrusiveRing: a circular doubly linked list threaded through the nodes.
//
// The arbiter keeps its waiting requests and sessions in rings (a session's
// requests in rotation order, a pool's sessions, per fixed counter the
// sessions and requests that may use it). A node carries one RingLinks per
// ring it can be on; the ring names the member, so one node can be on
// several rings at once and nothing is allocated to link it.
//
//   struct Node {
//     RingLinks<Node> in_a;
//     RingLinks<Node> in_b;
//   };
//   IntrusiveRing<Node, &Node::in_a> a;
//   a.PushBack(&n);
//
// A ring is its front pointer (null: empty): "where the ring starts". The
// back is the front's predecessor. Moving the front (StartAt, StartAfter)
// turns the ring without touching any link.
//
// Hide/Unhide are dancing links (Knuth, TAOCP 7.2.2.1): Hide takes a node
// out of its neighbours' links but leaves its own, so Unhide, called in the
// reverse order of the Hides, puts every node back exactly where it was.
// While nodes are hidden, front() may be a hidden node: walk with Next()
// from a node that is not hidden, and unhide before any other change.
//
// Every operation is O(1) and does not allocate. Not thread-safe.
#ifndef PFM_KERNEL_PMU_ARBITER_INTRUSIVE_RING_H_
#define PFM_KERNEL_PMU_ARBITER_INTRUSIVE_RING_H_

#include <cassert>

namespace pfm {

// A node's links for one ring; both null while it is on none.
template <typename T>
struct RingLinks {
  T* prev = nullptr;
  T* next = nullptr;
};

template <typename T, RingLinks<T> T::*kLinks>
class IntrusiveRing {
 public:
  bool empty() const { return front_ == nullptr; }
  T* front() const { return front_; }
  T* back() const { return front_ == nullptr ? nullptr : Prev(front_); }

  // The neighbours of a node on a ring of this kind.
  static T* Next(const T* n) { return (n->*kLinks).next; }
  static T* Prev(const T* n) { return (n->*kLinks).prev; }

  // `n` (on no ring of this kind) joins at the back; into an empty ring it
  // becomes the front.
  void PushBack(T* n) {
    assert(Next(n) == nullptr && Prev(n) == nullptr);
    if (front_ == nullptr) {
      Links(n) = {n, n};
      front_ = n;
      return;
    }
    InsertBefore(front_, n);
  }

  // Takes `n` (on this ring) off; if it was the front, the front moves to
  // its successor. Clears n's links.
  void Remove(T* n) {
    T* next = Next(n);
    if (next == n) {
      assert(front_ == n);
      front_ = nullptr;
    } else {
      Unlink(n);
      if (front_ == n) front_ = next;
    }
    Links(n) = {};
  }

  // `n` (on this ring) goes to the back; the others keep their order.
  void MoveToBack(T* n) {
    if (n == front_) {
      front_ = Next(n);
      return;
    }
    Unlink(n);
    InsertBefore(front_, n);
  }

  // The ring now starts at `n` (on this ring), or after it.
  void StartAt(T* n) { front_ = n; }
  void StartAfter(T* n) { front_ = Next(n); }

  // Dancing links: see the top of the file.
  static void Hide(T* n) { Unlink(n); }
  static void Unhide(T* n) {
    Links(Prev(n)).next = n;
    Links(Next(n)).prev = n;
  }

 private:
  static RingLinks<T>& Links(T* n) { return n->*kLinks; }

  static void Unlink(T* n) {
    Links(Prev(n)).next = Next(n);
    Links(Next(n)).prev = Prev(n);
  }

  // Links `n` in just before `at`.
  static void InsertBefore(T* at, T* n) {
    T* prev = Prev(at);
    Links(n) = {prev, at};
    Links(prev).next = n;
    Links(at).prev = n;
  }

  T* front_ = nullptr;
};

}  // namespace pfm

#endif  // PFM_KERNEL_PMU_ARBITER_INTRUSIVE_RING_H_
