// The Prometheus exposition reads executor statistics: flooding a worker's local queue
// shows up as stealgate_executor_overflows_total, polls as polls_total, and the text is in
// the exposition format.
#include "metrics/exporter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "io/runtime.h"
#include "proxy/gateway.h"
#include "series_value.h"

namespace sg {
namespace {

using testing::series_value;

TEST(Exporter, OverflowFromAFloodedLocalQueueIsExported) {
  exec::RuntimeConfig cfg;
  cfg.worker_threads = 1;
  io::Runtime rt(cfg);
  proxy::Gateway gw(rt);
  std::atomic<int> done{0};
  rt.exec().spawn_detached([&] {
    for (int i = 0; i < 2000; ++i) exec::spawn_detached([&] { done.fetch_add(1); });
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string text;
  while (std::chrono::steady_clock::now() < deadline) {
    text = metrics::render(gw);
    if (done.load() == 2000 && series_value(text, "stealgate_executor_polls_total{worker=\"0\"}") >= 2001) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(series_value(text, "stealgate_executor_overflows_total{worker=\"0\"}"), (2000.0 - 257) / 128);
  EXPECT_GE(series_value(text, "stealgate_executor_polls_total{worker=\"0\"}"), 2001);
  EXPECT_EQ(series_value(text, "stealgate_executor_workers"), 1);
  EXPECT_NE(text.find("# TYPE stealgate_executor_scheduling_delay_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("stealgate_build_info{version=\""), std::string::npos);
  // Every sample line is "name{labels} value" or "name value".
  std::regex line(R"(^([a-z_:][a-z0-9_:]*)(\{[^}]*\})? [-+0-9.eEinfaINF]+$)");
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    std::string l = text.substr(start, end - start);
    if (!l.empty() && l[0] != '#') {
      EXPECT_TRUE(std::regex_match(l, line)) << l;
    }
    start = end + 1;
  }
}

}  // namespace
}  // namespace sg
