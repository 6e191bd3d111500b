// Runs a slow, idempotent job (a walk of the whole heap) on request, coalescing the
// requests made while it runs into one more run after it.
//
// Guarantee: every request is followed by a start of the job that begins after the
// request was made (so the job sees what the requester did before asking), and the job
// never runs twice at once. A request made while the job runs returns at once; the
// running caller runs it again for all such requests together.
#pragma once

#include <atomic>
#include <cstdint>

namespace sg::exec {

class CoalescedRun {
 public:
  template <class Job>
  void request(Job&& job) {
    // Invariant: requested_ counts requests not yet covered by a run that started after
    // them; it is non-zero exactly while some caller is inside the loop below, and that
    // caller is the only one (the 0 -> 1 transition elects it).
    // acq_rel on both sides: the elected caller's next run happens-after each request it
    // takes over (acquire on fetch_sub reads the requesters' releases), and a requester
    // that hands over releases what it did before asking.
    if (requested_.fetch_add(1, std::memory_order_acq_rel) != 0) return;  // the running caller repeats
    uint32_t covered = 1;
    for (;;) {
      job();
      const uint32_t before = requested_.fetch_sub(covered, std::memory_order_acq_rel);
      if (before == covered) return;  // nobody asked during this run
      covered = before - covered;     // they asked during it: one more run covers them all
    }
  }

 private:
  std::atomic<uint32_t> requested_{0};
};

}  // namespace sg::exec
