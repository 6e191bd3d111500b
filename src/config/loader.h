// Loading stealgate.yaml: YAML -> validated, immutable Config. Every problem in the file
// is reported (not only the first), each as `file:line:column: yaml.path: message`.
#pragma once

#include <memory>
#include <string>
#include <string_view>
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

// Why a configured header field (a route's add/set, a direct response's headers) is
// refused: not a token name, a control character in the value, or a field stealgate frames or manages
// itself (Content-Length, Transfer-Encoding, Connection, Upgrade, Expect, Host, ...); "" if fine.
std::string header_field_refusal(std::string_view name, std::string_view value);
// The same for a name alone (a route's remove list: removing framing would unframe a body).
std::string header_name_refusal(std::string_view name);
bool is_field_name(std::string_view name);

// The effective configuration (defaults resolved) as YAML, for --print-config and the
// admin /config endpoint.
std::string to_yaml(const Config& c);

// The reference of every key (name, default, meaning) as markdown tables, each between
// `<!-- config table: NAME -->` and `<!-- end of config table -->`: the blocks that
// config/README.md holds (scripts/config-reference.py copies them in; a unit test compares).
std::string config_reference();

}  // namespace sg::config
