// Command line of the stealgate binary.
#pragma once

#include <string>
#include <vector>

namespace sg::app {

struct Options {
  enum class Mode { kRun, kCheckConfig, kPrintConfig, kConfigReference, kHelp, kVersion } mode = Mode::kRun;
  std::string config_path = "/etc/stealgate/stealgate.yaml";
  bool config_given = false;
};

// Parses argv; on a usage error returns false and sets `error` (exit code 2).
bool parse_options(const std::vector<std::string>& args, Options& out, std::string& error);
std::string usage();

}  // namespace sg::app
