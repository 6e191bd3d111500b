// The effective configuration as YAML (every default resolved), in the input schema, so
// its output is itself a valid configuration file; and the key reference. Both walk the
// section tables (config/sections.h).
#include <yaml-cpp/yaml.h>

#include "config/loader.h"
#include "config/sections.h"

namespace sg::config {

std::string to_yaml(const Config& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  detail::config_table().emit(e, c);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

std::string config_reference() {
  std::string out;
  for (const detail::ReferenceTable& t : detail::reference_tables()) {
    if (!out.empty()) out += "\n";
    out += "<!-- config table: " + t.name + " -->\n" + detail::reference_markdown(t) + "<!-- end of config table -->\n";
  }
  return out;
}

}  // namespace sg::config
