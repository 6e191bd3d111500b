#include "app/options.h"

namespace sg::app {

std::string usage() {
  return "Usage: stealgate [--config FILE] [--check-config [FILE]] [--print-config] [--config-reference] [--version]\n"
         "                 [--help]\n"
         "\n"
         "An HTTP/1.1 reverse proxy and API gateway on a work-stealing executor.\n"
         "\n"
         "Options:\n"
         "  -c, --config FILE         configuration file (default /etc/stealgate/stealgate.yaml)\n"
         "  -t, --check-config [FILE] validate the configuration, look up its endpoint names as a start\n"
         "                            would, and exit (0 = valid, 1 = invalid or cannot start)\n"
         "      --print-config        print the effective configuration (defaults resolved) and exit\n"
         "      --config-reference    print every configuration key with its default and meaning\n"
         "  -v, --version             print the version and exit\n"
         "  -h, --help                print this help and exit\n"
         "\n"
         "Signals: SIGHUP reloads the configuration (an invalid file keeps the old one serving),\n"
         "SIGUSR1 reopens the access log file, SIGUSR2 starts a new copy of the binary on the same\n"
         "sockets and drains this one once it serves (binary upgrade), SIGTERM/SIGINT drain and exit\n"
         "(a second one forces it).\n"
         "Admin endpoint (admin.address, default 127.0.0.1:9901): /metrics /healthz /ready /config\n";
}

bool parse_options(const std::vector<std::string>& args, Options& out, std::string& error) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const std::string& name, std::string& dst) {
      std::string prefix = name + "=";
      if (a.rfind(prefix, 0) == 0) {
        dst = a.substr(prefix.size());
        return true;
      }
      if (i + 1 >= args.size()) {
        error = "option '" + name + "' needs a file name";
        return false;
      }
      dst = args[++i];
      return true;
    };
    if (a == "-h" || a == "--help") {
      out.mode = Options::Mode::kHelp;
    } else if (a == "-v" || a == "--version") {
      out.mode = Options::Mode::kVersion;
    } else if (a == "-c" || a == "--config" || a.rfind("--config=", 0) == 0) {
      if (!value(a.rfind("--config=", 0) == 0 ? "--config" : a, out.config_path)) return false;
      out.config_given = true;
    } else if (a == "-t" || a == "--check-config" || a.rfind("--check-config=", 0) == 0) {
      out.mode = Options::Mode::kCheckConfig;
      if (a.rfind("--check-config=", 0) == 0) {
        out.config_path = a.substr(15);
        out.config_given = true;
      } else if (i + 1 < args.size() && !args[i + 1].empty() && args[i + 1][0] != '-') {
        out.config_path = args[++i];
        out.config_given = true;
      }
    } else if (a == "--print-config") {
      out.mode = Options::Mode::kPrintConfig;
    } else if (a == "--config-reference") {
      out.mode = Options::Mode::kConfigReference;
    } else {
      error = "unknown option '" + a + "'";
      return false;
    }
  }
  return true;
}

}  // namespace sg::app
