// A sample's value in a Prometheus exposition text, for the metrics tests.
#pragma once

#include <string>

namespace sg::testing {

// The value of the sample line "SERIES VALUE" (SERIES with its labels, as rendered), or -1
// when there is none.
inline double series_value(const std::string& text, const std::string& series) {
  const std::size_t pos = text.find("\n" + series + " ");
  if (pos == std::string::npos) return -1;
  return std::stod(text.substr(pos + series.size() + 2));
}

}  // namespace sg::testing
