#include "common/log.h"

#include <spdlog/async.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace sg::log {

namespace {

std::mutex g_mu;  // guards reconfiguration, never taken per request
std::shared_ptr<spdlog::details::thread_pool> g_pool;
std::atomic<std::shared_ptr<spdlog::logger>> g_events;
std::atomic<std::shared_ptr<spdlog::logger>> g_access;
std::atomic<bool> g_access_json{false};

// %* : the message as a JSON string (escaped), for the json event-log format.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string q = json_quote(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(q.data(), q.data() + q.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessageFlag>(); }
};
Options g_opts;

// Flushes both loggers once a second (file and pipe sinks are buffered; journald and log
// files should see lines promptly without a flush per line).
std::thread g_flusher;
std::mutex g_flusher_mu;
std::condition_variable g_flusher_cv;
bool g_flusher_stop = false;

void flusher_loop() {
  std::unique_lock lk(g_flusher_mu);
  while (!g_flusher_cv.wait_for(lk, std::chrono::seconds(1), [] { return g_flusher_stop; })) {
    if (auto e = g_events.load()) e->flush();
    if (auto a = g_access.load()) a->flush();
  }
}

// Lines a queue overrun dropped before the current pool existed (pools are replaced when
// the queue size changes).
uint64_t g_dropped_before = 0;

std::shared_ptr<spdlog::logger> make_logger(const std::string& name, spdlog::sink_ptr sink) {
  return std::make_shared<spdlog::async_logger>(name, std::move(sink), g_pool,
                                                spdlog::async_overflow_policy::overrun_oldest);
}

std::shared_ptr<spdlog::logger> fallback() {
  static auto l = std::make_shared<spdlog::logger>("early", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  return l;
}

void build_access_locked() {
  if (!g_opts.access_log) {
    g_access.store(nullptr);
    return;
  }
  spdlog::sink_ptr sink;
  if (g_opts.access_log_path == "stdout" || g_opts.access_log_path.empty()) {
    sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(g_opts.access_log_path, false);
  }
  auto l = make_logger("access", sink);
  // JSON lines get their time field from the pattern; the message carries the rest.
  l->set_pattern(g_opts.access_format == Format::kJson ? R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z",%v)"
                                                       : "%Y-%m-%dT%H:%M:%S.%e%z %v");
  l->set_level(spdlog::level::info);
  g_access.store(l);
}

}  // namespace

void setup(const Options& o) {
  std::lock_guard lk(g_mu);
  bool new_pool = !g_pool || o.queue_size != g_opts.queue_size;
  g_opts = o;
  if (new_pool) {
    if (g_pool) g_dropped_before += g_pool->overrun_counter();
    g_pool = std::make_shared<spdlog::details::thread_pool>(o.queue_size, 1);
  }
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto ev = make_logger("stealgate", sink);
  if (o.format == Format::kJson) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<JsonMessageFlag>('*').set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","msg":%*})");
    ev->set_formatter(std::move(f));
  } else {
    ev->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %-7l %v");
  }
  ev->set_level(spdlog::level::from_str(o.level == "warning" ? "warn" : o.level));
  ev->flush_on(spdlog::level::warn);
  g_events.store(ev);
  g_access_json.store(o.access_format == Format::kJson);
  build_access_locked();
  if (!g_flusher.joinable()) {
    g_flusher_stop = false;
    g_flusher = std::thread(flusher_loop);
  }
}

void reopen() {
  std::lock_guard lk(g_mu);
  if (g_opts.access_log && g_opts.access_log_path != "stdout") build_access_locked();
}

void shutdown() {
  if (g_flusher.joinable()) {
    {
      std::lock_guard lk(g_flusher_mu);
      g_flusher_stop = true;
    }
    g_flusher_cv.notify_all();
    g_flusher.join();
  }
  std::shared_ptr<spdlog::details::thread_pool> pool;
  {
    std::lock_guard lk(g_mu);
    if (auto e = g_events.exchange(nullptr)) e->flush();
    if (auto a = g_access.exchange(nullptr)) a->flush();
    pool = std::move(g_pool);
  }
  pool.reset();  // joins the backend thread after it drained the queue
}

std::shared_ptr<spdlog::logger> events() {
  auto e = g_events.load();
  return e ? e : fallback();
}

std::shared_ptr<spdlog::logger> access() { return g_access.load(); }

bool access_json() { return g_access_json.load(std::memory_order_relaxed); }

uint64_t dropped_lines() {
  std::lock_guard lk(g_mu);
  return g_dropped_before + (g_pool ? g_pool->overrun_counter() : 0);
}

namespace {

// The length of the well-formed UTF-8 sequence that starts s[i] (RFC 3629 §4: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0.
std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() - i < n || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

std::string_view text_safe(std::string_view s, std::string& scratch, bool in_quotes) {
  const auto plain = [&](unsigned char c) {
    return (c > 0x20 && c < 0x7f && c != '"' && c != '\\') || (c == ' ' && in_quotes);
  };
  std::size_t i = 0;
  while (i < s.size() && plain(static_cast<unsigned char>(s[i]))) ++i;
  if (i == s.size()) return s;
  scratch.assign(s.substr(0, i));
  for (; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (plain(c)) {
      scratch += static_cast<char>(c);
    } else if (c == '"' || c == '\\') {
      scratch += '\\';
      scratch += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      scratch += "\\x";
      scratch += kHex[c >> 4];
      scratch += kHex[c & 0xF];
    }
  }
  return scratch;
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_sequence(s, i);
      if (n == 0) {
        out += "\\ufffd";
      } else {
        out.append(s.substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace sg::log
