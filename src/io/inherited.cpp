#include "io/inherited.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace sg::io {

namespace {

// What is wrong with `fd` as a listening TCP socket ("" when nothing), and its address.
std::string inspect(int fd, tcp::endpoint& local) {
  int type = 0, listening = 0, protocol = 0;
  socklen_t len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return std::strerror(errno);
  len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0) return std::strerror(errno);
  len = sizeof(int);
  if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0) return std::strerror(errno);
  socklen_t alen = static_cast<socklen_t>(local.capacity());
  if (::getsockname(fd, local.data(), &alen) != 0) return std::strerror(errno);
  local.resize(alen);
  const int family = local.data()->sa_family;
  if (type != SOCK_STREAM || protocol != IPPROTO_TCP || (family != AF_INET && family != AF_INET6)) {
    return "not a TCP socket (only TCP listeners can be inherited)";
  }
  if (listening == 0) return "not listening";
  return "";
}

}  // namespace

InheritedSockets::~InheritedSockets() { close_unclaimed(); }

std::string InheritedSockets::adopt(int first, int count, const std::vector<std::string>& names) {
  std::lock_guard lk(mu_);
  for (int i = 0; i < count; ++i) {
    Socket s;
    s.fd = first + i;
    if (static_cast<std::size_t>(i) < names.size()) s.name = names[static_cast<std::size_t>(i)];
    std::string why = inspect(s.fd, s.local);
    if (!why.empty()) {
      return "inherited descriptor " + std::to_string(s.fd) + (s.name.empty() ? "" : " (\"" + s.name + "\")") +
             ": " + why;
    }
    socks_.push_back(std::move(s));
  }
  return "";
}

int InheritedSockets::claim(const std::string& name, const tcp::endpoint& ep, std::string& err) {
  std::lock_guard lk(mu_);
  // Port 0 in the config means "any port": the socket of that name on that host is it
  // (what a binary upgrade hands over for a listener whose port was picked at bind).
  auto matches = [&](const Socket& s) {
    return s.local == ep || (ep.port() == 0 && s.name == name && s.local.address() == ep.address());
  };
  for (Socket& s : socks_) {
    if (s.fd < 0 || !s.claimed_by.empty() || !matches(s)) continue;
    s.claimed_by = name;
    return s.fd;
  }
  for (const Socket& s : socks_) {
    if (s.name != name || !s.claimed_by.empty() || s.fd < 0) continue;
    err = "the inherited socket named \"" + name + "\" listens on " + endpoint_text(s.local) + ", not on " +
          endpoint_text(ep) + "; make the socket unit's ListenStream= and the listener's address agree";
    return -1;
  }
  return -1;
}

std::vector<std::string> InheritedSockets::close_unclaimed() {
  std::lock_guard lk(mu_);
  std::vector<std::string> closed;
  for (Socket& s : socks_) {
    if (s.fd < 0 || !s.claimed_by.empty()) continue;
    ::close(s.fd);
    closed.push_back(describe(s));
    s.fd = -1;
  }
  return closed;
}

Listening listen_on(IoContext ctx, InheritedSockets* inherited, const std::string& name, tcp::endpoint ep,
                    const ListenOptions& opts) {
  Listening out;
  if (inherited != nullptr) {
    int fd = inherited->claim(name, ep, out.error);
    if (!out.error.empty()) return out;
    if (fd >= 0) {
      auto adopted = TcpListener::adopt(ctx, fd);
      if (!adopted.ok()) {
        out.error = "cannot adopt the inherited socket for " + endpoint_text(ep) + ": " + adopted.error().message();
        return out;
      }
      out.listener.emplace(std::move(*adopted));
      out.inherited = true;
      return out;
    }
  }
  auto bound = TcpListener::bind(ctx, ep, opts);
  constexpr std::chrono::milliseconds kRetryEvery{100};
  while (!bound.ok() && bound.error() == std::errc::address_in_use && out.in_use_waited < opts.in_use_wait) {
    std::this_thread::sleep_for(kRetryEvery);
    out.in_use_waited += kRetryEvery;
    bound = TcpListener::bind(ctx, ep, opts);
  }
  if (!bound.ok()) {
    out.error = "cannot listen on " + endpoint_text(ep) + ": " + bound.error().message();
    if (out.in_use_waited.count() > 0) {
      out.error += " (still, after " + std::to_string(out.in_use_waited.count()) + " ms)";
    }
    return out;
  }
  out.listener.emplace(std::move(*bound));
  return out;
}

namespace {
bool has_reuse_port(int fd) {
  int on = 0;
  socklen_t len = sizeof(on);
  return ::getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, &len) == 0 && on != 0;
}
}  // namespace

ListeningGroup listen_group(IoContext ctx, InheritedSockets* inherited, const std::string& name, tcp::endpoint ep,
                            const ListenOptions& opts, std::size_t want) {
  ListeningGroup out;
  Listening first = listen_on(ctx, inherited, name, ep, opts);
  if (!first.listener) {
    out.error = std::move(first.error);
    return out;
  }
  out.inherited = first.inherited;
  out.in_use_waited = first.in_use_waited;
  const tcp::endpoint bound = first.listener->local_endpoint();  // the port, when ep's was 0
  const bool first_reuses_port = has_reuse_port(first.listener->native_handle());
  out.listeners.push_back(std::move(*first.listener));
  // Every further inherited socket on the address, whatever opts.reuse_port says now: a
  // group handed over (a binary upgrade, socket units with ReusePort=yes) stays whole, as
  // closing one of its sockets would reset the connections queued on it.
  for (std::string ignored; out.inherited;) {
    int fd = inherited->claim(name, bound, ignored);
    if (fd < 0) break;
    auto adopted = TcpListener::adopt(ctx, fd);
    if (!adopted.ok()) {
      out.note = "cannot adopt an inherited socket: " + adopted.error().message();
      break;
    }
    out.listeners.push_back(std::move(*adopted));
  }
  if (!opts.reuse_port) return out;
  // An inherited socket without SO_REUSEPORT (socket activation's default) can have no
  // siblings: where the group was asked for only as the default, that is no news.
  if (opts.exclusive_address && out.inherited && !first_reuses_port) return out;
  ListenOptions sibling_opts = opts;
  sibling_opts.exclusive_address = false;  // the first holds the address: the rest join it
  while (out.listeners.size() < want && out.note.empty()) {
    auto sibling = TcpListener::bind(ctx, bound, sibling_opts);
    if (!sibling.ok()) {
      out.note = "cannot bind another socket beside it: " + sibling.error().message() +
                 (out.inherited ? " (sockets share an address only with SO_REUSEPORT and one owner: hand over a "
                                  "socket per worker instead, socket units alike in ListenStream= and "
                                  "FileDescriptorName=, with ReusePort=yes)"
                                : "");
      break;
    }
    out.listeners.push_back(std::move(*sibling));
  }
  return out;
}

std::size_t InheritedSockets::size() const {
  std::lock_guard lk(mu_);
  return socks_.size();
}

std::string InheritedSockets::describe(const Socket& s) {
  return (s.name.empty() ? std::string("descriptor ") + std::to_string(s.fd) : "\"" + s.name + "\"") + " on " +
         endpoint_text(s.local);
}

}  // namespace sg::io
