// The config loader over arbitrary YAML text: never crashes (yaml-cpp exceptions included);
// every rejection names file:line:column and a message; an accepted config prints to YAML
// that loads back to the same printed text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/loader.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  sg::config::LoadResult r = sg::config::load_string(text, "fuzz.yaml");
  if (!r.ok()) {
    FUZZ_CHECK(!r.errors.empty());
    for (const auto& e : r.errors) {
      FUZZ_CHECK(e.file == "fuzz.yaml");
      FUZZ_CHECK(e.line > 0 && e.column > 0);
      FUZZ_CHECK(!e.message.empty());
    }
    return 0;
  }
  const std::string printed = sg::config::to_yaml(*r.config);
  sg::config::LoadResult again = sg::config::load_string(printed, "printed.yaml");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(sg::config::to_yaml(*again.config) == printed);
  return 0;
}
