// Loading stealgate.yaml: YAML -> validated, immutable Config. Every problem in the file
// is reported (not only the first), each as `file:line:column: yaml.path: message`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/schema.h"

namespace sg::config {

struct ConfigError {
  std::string file;
  int line = 0;    // 1-based; 0 when unknown
  int column = 0;  // 1-based
  std::string path;  // e.g. routes[1].cluster
  std::string message;
  std::string to_string() const;
};

struct LoadResult {
  std::shared_ptr<const Config> config;  // set only when errors is empty
  std::vector<ConfigError> errors;
  bool ok() const { return config != nullptr; }
  std::string error_text() const;  // one error per line
};

LoadResult load_file(const std::string& path);
LoadResult load_string(const std::string& yaml, const std::string& name = "<config>");

// The effective configuration (defaults resolved) as YAML, for --print-config and the
// admin /config endpoint.
std::string to_yaml(const Config& c);

}  // namespace sg::config
