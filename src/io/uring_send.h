// The ring's background sends (io/uring.h, start_background_send) and the lingering close
// that follows one (close_after_send): what follows such an operation in its allocation,
// shared by uring.cpp (which completes and frees operations) and uring_send.cpp. Internal
// to src/io.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "io/uring.h"

namespace sg::io::uring_send {

// user_data of the completions that are not operations. Operations are heap pointers,
// never this small.
inline constexpr uint64_t kWakeTag = 1;    // the eventfd read
inline constexpr uint64_t kCancelTag = 2;  // a completion of no use: a cancel, a close

// What follows a background send, before its bytes. The ring's thread alone writes it
// after the start (a reader on another thread sees it through `completed`).
struct BackgroundSend {
  int fd = -1;
  uint32_t size = 0;  // bytes to send
  uint32_t sent = 0;  // bytes the kernel took so far
  uint32_t eagain_resends = 0;
  // Lingering (close_after_send): its socket is closed, and `fd` is closed once the send
  // has finished, or cancelled at `deadline_ns` (steady clock).
  bool lingering = false;
  bool cancel_sent = false;
  // The descriptor's close is linked behind the send (chain_fin), until a short
  // completion breaks the chain.
  bool fin_chained = false;
  int64_t deadline_ns = 0;
  std::string tail;
  // The socket slot that holds the send (Socket::send_slot), under the operation's lock;
  // null once disowned.
  std::atomic<UringOp*>* owner = nullptr;
};

// Bytes a background send keeps free after its own, for a tail that a close appends
// before the send is submitted (chain_fin): a TLS close_notify is 24-31 bytes.
inline constexpr std::size_t kTailRoom = 32;

inline BackgroundSend& background(UringOp* op) { return *reinterpret_cast<BackgroundSend*>(op + 1); }
inline const BackgroundSend& background(const UringOp* op) { return *reinterpret_cast<const BackgroundSend*>(op + 1); }
inline char* background_bytes(UringOp* op) { return reinterpret_cast<char*>(&background(op) + 1); }

// While sends linger, a park wakes at least this often to cancel those past their deadline.
inline constexpr std::chrono::milliseconds kLingerCheck{250};

// A send that went out whole leaves its socket's slot at once (the caller then drops the
// socket's reference too). Under op->lock, before `completed` is published: a socket
// that sees it completed may go away, and this must not look at its slot then. The
// exchange fails when the socket took the send out first (its write, flush or close).
bool leave_slot_locked(UringOp* op) noexcept;

}  // namespace sg::io::uring_send
