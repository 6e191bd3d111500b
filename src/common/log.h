// Logging: an error/event log and an access log, both through spdlog's async thread so a
// worker only formats and enqueues. The queue is bounded; when it is full the oldest line
// is dropped and counted (dropped_lines()), so logging never blocks the data path.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <memory>
#include <string>

namespace sg::log {

enum class Format { kText, kJson };

struct Options {
  std::string level = "info";
  Format format = Format::kText;
  bool access_log = true;
  std::string access_log_path = "stdout";  // "stdout" or a file path
  Format access_format = Format::kText;
  std::size_t queue_size = 8192;
};

// (Re)configures both loggers. Safe to call again on reload.
void setup(const Options& o);
// Reopens the access log file (SIGUSR1, after logrotate moved it).
void reopen();
void shutdown();

std::shared_ptr<spdlog::logger> events();
std::shared_ptr<spdlog::logger> access();  // null when the access log is off
bool access_json();
uint64_t dropped_lines();

// A JSON string literal with escaping. Always valid UTF-8 (RFC 8259 §8.1), whatever the
// bytes: a client can put obs-text in a header value that a note quotes, and a line that
// is not UTF-8 is dropped by log shippers, the attempt's trace with it. Each byte that does
// not begin a well-formed sequence becomes U+FFFD.
std::string json_quote(std::string_view s);

// For a field a text log line shows in double quotes (a request-target, a note that may
// quote a client's bytes): `s` itself when it holds nothing to escape, else an escaped copy
// in `scratch` (as nginx's log: '"' and '\' get a backslash; control bytes, DEL and bytes
// of 0x80 and above are written \xHH), so no value can end its quotes and forge fields.
// `in_quotes` false: a field shown without quotes (a TLS server name), whose spaces are
// escaped too.
std::string_view text_safe(std::string_view s, std::string& scratch, bool in_quotes = true);

}  // namespace sg::log

#define SG_LOG_INFO(...) ::sg::log::events()->info(__VA_ARGS__)
#define SG_LOG_WARN(...) ::sg::log::events()->warn(__VA_ARGS__)
#define SG_LOG_ERROR(...) ::sg::log::events()->error(__VA_ARGS__)
#define SG_LOG_DEBUG(...) ::sg::log::events()->debug(__VA_ARGS__)
