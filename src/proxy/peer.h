// Who is on the other end of a downstream connection: its "ip:port" as accept reported
// it, kept for the connection's life, idle time included, in its task (session.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "io/socket.h"

namespace sg::proxy {

// The text is inline up to kInline characters: every IPv4 "ip:port" and most IPv6 ones.
// (A std::string keeps 15 inline, so a client like "203.0.113.7:51234" cost every idle
// connection a malloc chunk, which loopback benchmarks never show.) Longer ones are on the
// heap. The same 32 bytes as a std::string.
class Peer {
 public:
  explicit Peer(const io::tcp::endpoint& ep) { assign(ep); }
  ~Peer() {
    if (on_heap()) delete[] heap_data();
  }
  // Now `ep` (the client a PROXY protocol header names).
  void reset(const io::tcp::endpoint& ep) {
    if (on_heap()) delete[] heap_data();
    bytes_[kInline] = 0;
    assign(ep);
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  std::string_view address() const {
    if (on_heap()) return {heap_data(), heap_size()};
    return {bytes_, static_cast<std::size_t>(bytes_[kInline])};
  }
  // The address without its port (and an IPv6 address without its brackets).
  std::string_view ip() const {
    const std::string_view a = address();
    std::string_view ip = a.substr(0, a.rfind(':'));
    if (ip.size() >= 2 && ip.front() == '[') ip = ip.substr(1, ip.size() - 2);
    return ip;
  }

 private:
  void assign(const io::tcp::endpoint& ep) {
    static_assert(io::kEndpointV4TextMax <= kInline);
    char v4[io::kEndpointV4TextMax];
    if (std::size_t n = io::write_endpoint_v4_text(ep, v4); n != 0) {
      set_inline(v4, n);
    } else {
      set(io::endpoint_text(ep));
    }
  }
  // bytes_[kInline] is the inline text's length, or kOnHeap; on the heap, bytes_ starts
  // with the text's pointer and size instead (memcpy'd: no type punning).
  static constexpr std::size_t kInline = 31;
  static constexpr char kOnHeap = static_cast<char>(0xFF);
  bool on_heap() const { return bytes_[kInline] == kOnHeap; }
  char* heap_data() const {
    char* p;
    std::memcpy(&p, bytes_, sizeof p);
    return p;
  }
  std::size_t heap_size() const {
    std::size_t n;
    std::memcpy(&n, bytes_ + sizeof(char*), sizeof n);
    return n;
  }
  void set_inline(const char* text, std::size_t n) {
    std::memcpy(bytes_, text, n);
    bytes_[kInline] = static_cast<char>(n);
  }
  void set(std::string_view text) {
    if (text.size() <= kInline) {
      set_inline(text.data(), text.size());
      return;
    }
    char* p = new char[text.size()];
    std::memcpy(p, text.data(), text.size());
    const std::size_t n = text.size();
    std::memcpy(bytes_, &p, sizeof p);
    std::memcpy(bytes_ + sizeof p, &n, sizeof n);
    bytes_[kInline] = kOnHeap;
  }

  char bytes_[kInline + 1];
};
static_assert(sizeof(Peer) == 32);

}  // namespace sg::proxy
