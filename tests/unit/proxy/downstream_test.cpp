// Http1Response (proxy/downstream.h) on its own, over a socket pair: how a response is
// framed for HTTP/1.1 and HTTP/1.0 clients (a close-delimited body becomes chunked for
// 1.1 and stays close-delimited for 1.0; trailers pass only from a chunked upstream), and
// which interim responses a client gets (none for 1.0, one 100 Continue at most).
#include "proxy/downstream.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "io/runtime.h"

namespace sg::proxy {
namespace {

using namespace std::chrono_literals;

std::string drain(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// Parses `request` from a socket pair, then lets `respond` use an Http1Response for it;
// returns what the client received.
template <class F>
std::string exchange(const std::string& request, F respond) {
  io::Runtime rt(exec::RuntimeConfig{});
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  EXPECT_EQ(::send(sv[1], request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  auto s = io::Socket::adopt(rt.context(), sv[0]);
  io::Stream client{io::TcpStream(std::move(s))};
  config::ListenerSection listener;
  config::RouteSection route;
  auto h = rt.spawn([&]() -> exec::Task<bool> {
    http::MessageReader reader(client, http::Parser::Mode::kRequest, http::ParserLimits{});
    http::HeadRead hr = co_await reader.read_head(io::Deadline::after(2s), 2s);
    if (hr.status != http::ReadStatus::kOk) co_return false;
    Http1Response response(client, reader, listener, &route);
    co_await respond(response);
    co_return true;
  });
  EXPECT_TRUE(h.wait().value_or(false));
  std::string got = drain(sv[1]);
  ::close(sv[1]);
  return got;
}

http::ResponseHead response(int status, http::BodyKind body) {
  http::ResponseHead r;
  r.status = status;
  r.reason = "OK";
  r.body = body;
  return r;
}

const http::HeaderMap kNoTrailers;

TEST(Http1Response, ACloseDelimitedBodyIsChunkedForHttp11) {
  std::string got = exchange("GET / HTTP/1.1\r\nHost: h\r\n\r\n", [](Http1Response& r) -> exec::Task<void> {
    const std::string_view piece[] = {"hello"};
    r.start(response(200, http::BodyKind::kUntilClose), true);
    co_await r.send_body(piece, true, kNoTrailers);
    EXPECT_FALSE(r.reusable()) << "the upstream connection ended the body";
  });
  EXPECT_NE(got.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), std::string::npos) << got;
}

TEST(Http1Response, ACloseDelimitedBodyStaysSoForHttp10) {
  std::string got = exchange("GET / HTTP/1.0\r\nHost: h\r\n\r\n", [](Http1Response& r) -> exec::Task<void> {
    const std::string_view piece[] = {"hello"};
    r.start(response(200, http::BodyKind::kUntilClose), true);
    co_await r.send_body(piece, true, kNoTrailers);
    EXPECT_FALSE(r.reusable());
  });
  EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
  EXPECT_TRUE(got.ends_with("\r\n\r\nhello")) << got;
}

TEST(Http1Response, TrailersPassOnlyFromAChunkedUpstream) {
  http::HeaderMap trailers;
  trailers.add("X-Sum", "42");
  trailers.add("Content-Length", "1");  // never: a trailer must not smuggle framing
  std::string got = exchange("GET / HTTP/1.1\r\nHost: h\r\n\r\n", [&](Http1Response& r) -> exec::Task<void> {
    r.start(response(200, http::BodyKind::kChunked), true);
    co_await r.send_body({}, true, trailers);
    EXPECT_TRUE(r.reusable());
  });
  EXPECT_TRUE(got.ends_with("0\r\nX-Sum: 42\r\n\r\n")) << got;
}

TEST(Http1Response, InterimResponsesOnlyToHttp11AndOneContinueAtMost) {
  std::string got11 = exchange("GET / HTTP/1.1\r\nHost: h\r\n\r\n", [](Http1Response& r) -> exec::Task<void> {
    co_await r.send_continue();
    co_await r.send_interim(response(100, http::BodyKind::kNone));  // the upstream's own 100: not a second
    co_await r.send_interim(response(103, http::BodyKind::kNone));
  });
  EXPECT_EQ(got11, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 OK\r\n\r\n");
  std::string got10 = exchange("GET / HTTP/1.0\r\nHost: h\r\n\r\n", [](Http1Response& r) -> exec::Task<void> {
    co_await r.send_interim(response(103, http::BodyKind::kNone));
  });
  EXPECT_EQ(got10, "");
}

}  // namespace
}  // namespace sg::proxy
