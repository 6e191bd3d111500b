// Unit tests that run on both I/O drivers: TEST_P suites instantiated with kDrivers, and a
// runtime made for the test's driver. Where the kernel refuses io_uring (a sysctl, a
// seccomp profile), the io_uring instances are skipped with the reason written to
// $STEALGATE_NOT_APPLICABLE_LOG, which scripts/test.sh prints in its summary.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "io/runtime.h"
#include "io/uring.h"

namespace sg::testing {

inline const auto kDrivers = ::testing::Values(io::IoDriverKind::kEpoll, io::IoDriverKind::kIoUring);

inline std::string driver_test_name(const ::testing::TestParamInfo<io::IoDriverKind>& info) {
  return std::string(io::io_driver_name(info.param));
}

// Whether `kind` can run here; when not, says why in the not-applicable log.
inline bool driver_available(io::IoDriverKind kind, const std::string& test) {
  if (kind == io::IoDriverKind::kEpoll) return true;
  std::string why;
  if (io::UringDriver::available(why)) return true;
  if (const char* log = std::getenv("STEALGATE_NOT_APPLICABLE_LOG")) {
    if (FILE* f = std::fopen(log, "a")) {
      std::fprintf(f, "%s [io_uring]: the kernel refuses io_uring here: %s\n", test.c_str(), why.c_str());
      std::fclose(f);
    }
  }
  return false;
}

inline std::unique_ptr<io::Runtime> make_runtime(io::IoDriverKind kind, exec::RuntimeConfig cfg) {
  auto rt = io::Runtime::create(cfg, kind);
  if (!rt.ok()) {
    ADD_FAILURE() << "cannot create a runtime on " << io::io_driver_name(kind) << ": " << rt.error().message();
    return nullptr;
  }
  return std::move(*rt);
}

inline bool uses_io_uring(io::Runtime& rt) { return rt.driver_kind() == io::IoDriverKind::kIoUring; }

// io_uring operations started and not yet completed on worker `worker`'s ring (0 on epoll).
inline std::size_t ring_ops_in_flight(io::Runtime& rt, std::size_t worker) {
  const auto stats = rt.ring_stats();
  return worker < stats.size() ? stats[worker].in_flight : 0;
}

// The same, over every ring.
inline std::size_t ring_ops_in_flight(io::Runtime& rt) {
  std::size_t n = 0;
  for (const io::RingStats& r : rt.ring_stats()) n += r.in_flight;
  return n;
}

}  // namespace sg::testing

// In a TEST_P body of a suite over IoDriverKind: skips (and logs why) where the driver
// cannot run, then makes `rt` (an io::Runtime&) on it with `cfg`.
#define SG_DRIVER_RUNTIME(rt, cfg)                                                                       \
  if (!::sg::testing::driver_available(GetParam(), ::testing::UnitTest::GetInstance()->current_test_info()->name())) \
    GTEST_SKIP() << "io_uring is not available here";                                                \
  auto rt##_owner = ::sg::testing::make_runtime(GetParam(), (cfg));                                   \
  ASSERT_NE(rt##_owner, nullptr);                                                                      \
  ::sg::io::Runtime& rt = *rt##_owner
