#include "http/serialize.h"

#include <ctime>

namespace sg::http {

std::string_view reason_phrase(int status) noexcept {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

void append_fields(std::string& out, const HeaderMap& headers) {
  for (const auto& h : headers) {
    out += h.name;
    out += ": ";
    out += h.value;
    out += "\r\n";
  }
}

void append_request_head(std::string& out, std::string_view method, std::string_view target,
                         const HeaderMap& headers) {
  out += method;
  out += ' ';
  out += target;
  out += " HTTP/1.1\r\n";
  append_fields(out, headers);
  out += "\r\n";
}

void append_response_head(std::string& out, int minor, int status, std::string_view reason,
                          const HeaderMap& headers) {
  out += minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += reason.empty() ? reason_phrase(status) : reason;
  out += "\r\n";
  append_fields(out, headers);
  out += "\r\n";
}

void append_chunk_size(std::string& out, std::size_t n) {
  char buf[24];
  int len = 0;
  char tmp[20];
  do {
    tmp[len++] = "0123456789abcdef"[n & 0xf];
    n >>= 4;
  } while (n != 0);
  int j = 0;
  while (len > 0) buf[j++] = tmp[--len];
  buf[j++] = '\r';
  buf[j++] = '\n';
  out.append(buf, static_cast<std::size_t>(j));
}

std::string_view http_date_now() {
  thread_local std::time_t cached_sec = 0;
  thread_local char cached[40];
  thread_local std::size_t cached_len = 0;
  std::time_t now = std::time(nullptr);
  if (now != cached_sec) {
    std::tm tm{};
    gmtime_r(&now, &tm);
    cached_len = std::strftime(cached, sizeof(cached), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    cached_sec = now;
  }
  return {cached, cached_len};
}

}  // namespace sg::http
