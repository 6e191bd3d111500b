// TimerWheel: a hierarchical timing wheel after Tokio's runtime/time/wheel. Six levels of
// 64 slots at 1 ms resolution: a slot of level L spans 64^L ms, so level 0 holds the next
// 64 ms one millisecond per slot and level 5 reaches about 2.2 years ahead.
//
// Placement: an entry expiring at `when` (ms) goes to the level of the highest 6-bit group
// in which `when` differs from the wheel's current time `elapsed`, into the slot that
// `when` has at that level. So every entry of a lower level expires before every entry of
// a higher one, and the earliest occupied slot is found with one 64-bit mask per level.
// Advancing: the earliest slot due is taken whole; time moves to the slot's start; entries
// due by then fire, the rest are placed again relative to the new time (a lower level).
//
// Insert and remove are O(1), finding the next expiry O(levels). Intrusive: the nodes
// live in their owners (awaiters in coroutine frames); no allocation. Not synchronised:
// exec/timers.h puts each wheel under a lock.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace sg::exec {

// A node is the base of what it times (exec::TimerEntry), which finds itself from the node
// the wheel hands back with a static_cast: no owner pointer.
struct TimerNode {
  TimerNode* prev = nullptr;
  TimerNode* next = nullptr;
  uint64_t when = 0;  // expiry, ms on the wheel's clock
  uint8_t level = 0;
  uint8_t slot = 0;
  bool linked = false;  // in a slot list (its links mean something only then)
};

class TimerWheel {
 public:
  static constexpr unsigned kLevels = 6;
  static constexpr unsigned kSlotBits = 6;
  static constexpr unsigned kSlots = 1u << kSlotBits;
  // Entries further out than this are placed by their clamped distance and placed again
  // each time the top level comes round to their slot.
  static constexpr uint64_t kMaxDuration = (uint64_t{1} << (kSlotBits * kLevels)) - 1;

  uint64_t elapsed() const { return elapsed_; }
  bool empty() const { return count_ == 0; }
  std::size_t size() const { return count_; }

  // Links `n` to expire at n->when. False (nothing linked) when it is already due.
  bool insert(TimerNode* n) {
    if (n->when <= elapsed_) return false;
    const unsigned level = level_for(elapsed_, n->when);
    link(n, level, static_cast<unsigned>(n->when >> (level * kSlotBits)) & (kSlots - 1));
    occupied_[level] |= uint64_t{1} << n->slot;
    return true;
  }

  void remove(TimerNode* n) {
    if (!n->linked) return;
    TimerNode*& head = slots_[n->level][n->slot];
    if (n->prev != nullptr) n->prev->next = n->next;
    else head = n->next;
    if (n->next != nullptr) n->next->prev = n->prev;
    if (head == nullptr && n->level < kLevels) occupied_[n->level] &= ~(uint64_t{1} << n->slot);
    n->linked = false;
    --count_;
  }

  // When advance() will next have something to do: the start of the earliest occupied
  // slot (exact for level 0; a higher slot's entries are re-placed then, not all due).
  std::optional<uint64_t> next_expiration() const {
    if (due() != nullptr) return elapsed_;
    if (auto e = earliest()) return e->deadline;
    return std::nullopt;
  }

  // Moves time towards `now`, calling fire(node) for each entry due by then, at most
  // `max` of them; each is unlinked before its call (fire may not touch the wheel).
  // Returns how many fired; when that is `max`, entries may still be due (call again).
  template <class Fire>
  std::size_t advance(uint64_t now, std::size_t max, Fire&& fire) {
    std::size_t fired = 0;
    for (;;) {
      while (TimerNode* n = due()) {
        if (fired == max) return fired;
        remove(n);
        fire(n);
        ++fired;
      }
      std::optional<Expiration> e = earliest();
      if (!e || e->deadline > now) break;
      TimerNode* list = slots_[e->level][e->slot];
      slots_[e->level][e->slot] = nullptr;
      occupied_[e->level] &= ~(uint64_t{1} << e->slot);
      elapsed_ = e->deadline;
      while (list != nullptr) {
        TimerNode* n = list;
        list = n->next;
        n->linked = false;
        --count_;
        // Due ones wait in the due list, so that a full batch can stop anywhere.
        if (!insert(n)) link(n, kLevels, 0);
      }
    }
    if (now > elapsed_) elapsed_ = now;
    return fired;
  }

 private:
  struct Expiration {
    unsigned level;
    unsigned slot;
    uint64_t deadline;
  };

  static unsigned level_for(uint64_t elapsed, uint64_t when) {
    uint64_t masked = (elapsed ^ when) | (kSlots - 1);
    if (masked >= kMaxDuration) masked = kMaxDuration - 1;
    const unsigned significant = 63u - static_cast<unsigned>(std::countl_zero(masked));
    return significant / kSlotBits;
  }

  static uint64_t slot_range(unsigned level) { return uint64_t{1} << (level * kSlotBits); }

  std::optional<Expiration> earliest() const {
    for (unsigned level = 0; level < kLevels; ++level) {
      if (auto e = level_expiration(level)) return e;
    }
    return std::nullopt;
  }

  std::optional<Expiration> level_expiration(unsigned level) const {
    const uint64_t occupied = occupied_[level];
    if (occupied == 0) return std::nullopt;
    const uint64_t range = slot_range(level);
    const unsigned now_slot = static_cast<unsigned>((elapsed_ / range) & (kSlots - 1));
    // The first occupied slot at or after the current one, wrapping round.
    const auto skip = static_cast<unsigned>(std::countr_zero(std::rotr(occupied, static_cast<int>(now_slot))));
    const unsigned slot = (skip + now_slot) & (kSlots - 1);
    const uint64_t level_range = range * kSlots;
    uint64_t deadline = (elapsed_ & ~(level_range - 1)) + slot * range;
    // A slot "before" now holds entries placed by their clamped distance (more than
    // kMaxDuration out): its turn comes in the next round of this level.
    if (deadline <= elapsed_) deadline += level_range;
    return Expiration{level, slot, deadline};
  }

  void link(TimerNode* n, unsigned level, unsigned slot) {
    n->level = static_cast<uint8_t>(level);
    n->slot = static_cast<uint8_t>(slot);
    TimerNode*& head = slots_[level][slot];
    n->prev = nullptr;
    n->next = head;
    if (head != nullptr) head->prev = n;
    head = n;
    n->linked = true;
    ++count_;
  }
  TimerNode* due() const { return slots_[kLevels][0]; }

 public:
  // Some linked entry (the due list first), or nullptr when empty: for tearing down.
  TimerNode* first() const {
    if (count_ == 0) return nullptr;
    for (const auto& row : slots_) {
      for (TimerNode* head : row) {
        if (head != nullptr) return head;
      }
    }
    return nullptr;
  }

 private:

  uint64_t elapsed_ = 0;
  std::size_t count_ = 0;
  uint64_t occupied_[kLevels] = {};
  // Row kLevels, slot 0: entries found due while advancing and not fired yet.
  TimerNode* slots_[kLevels + 1][kSlots] = {};
};

}  // namespace sg::exec
