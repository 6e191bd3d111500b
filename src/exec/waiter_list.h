// WaiterList: the queue of suspended waiters shared by Notify and Semaphore. Intrusive and
// doubly linked through T::prev / T::next (the nodes live in the waiters' awaiters, in
// their coroutine frames), so linking costs no allocation and a cancelled waiter unlinks
// itself in O(1). Not synchronised: every call is made under the owning primitive's lock.
// The links of a node that is not in the list are meaningless (owners track membership
// with their own `linked` flag).
#pragma once

#include <cstddef>

namespace sg::exec {

template <class T>
class WaiterList {
 public:
  bool empty() const { return head_ == nullptr; }
  T* front() const { return head_; }
  T* back() const { return tail_; }
  std::size_t size() const { return size_; }

  void push_back(T* w) {
    w->prev = tail_;
    w->next = nullptr;
    if (tail_ != nullptr) tail_->next = w;
    else head_ = w;
    tail_ = w;
    ++size_;
  }

  T* pop_front() {
    T* w = head_;
    head_ = w->next;
    if (head_ != nullptr) head_->prev = nullptr;
    else tail_ = nullptr;
    --size_;
    return w;
  }

  void remove(T* w) {
    if (w->prev != nullptr) w->prev->next = w->next;
    else head_ = w->next;
    if (w->next != nullptr) w->next->prev = w->prev;
    else tail_ = w->prev;
    --size_;
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace sg::exec
