#include "config/loader.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <tuple>
#include <sstream>

#include "config/sections.h"
#include "config/yaml_walk.h"

namespace sg::config {

using detail::Ctx;
using detail::child;
using detail::index;

std::string Address::text() const {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                             : host + ":" + std::to_string(port);
}

const ClusterSection* Config::find_cluster(const std::string& name) const {
  for (const auto& c : clusters) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string ConfigError::to_string() const {
  std::string s = file;
  if (line > 0) s += ":" + std::to_string(line) + ":" + std::to_string(column);
  s += ": ";
  if (!path.empty()) s += path + ": ";
  s += message;
  return s;
}

std::string LoadResult::error_text() const {
  std::string out;
  for (const auto& e : errors) out += e.to_string() + "\n";
  return out;
}

bool is_field_name(std::string_view name) {
  static constexpr std::string_view kTchar = "!#$%&'*+-.^_`|~";
  if (name.empty()) return false;
  for (char c : name) {
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && kTchar.find(c) == std::string_view::npos) return false;
  }
  return true;
}

std::string header_field_refusal(std::string_view name, std::string_view value) {
  for (char c : value) {
    // field-value is VCHAR / obs-text / SP / HTAB (RFC 9110 §5.5): a control character would
    // make every message carrying it malformed (and CR/LF would inject fields).
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return "header value contains a control character (CR, LF, NUL, ...)";
  }
  return header_name_refusal(name);
}

std::string header_name_refusal(std::string_view name) {
  if (!is_field_name(name)) return "\"" + std::string(name) + "\" is not a header name";
  // Framing and connection fields are stealgate's to write: a configured one would contradict
  // the framing it produces (two lengths, a smuggling recipe) or the connection's handling.
  for (std::string_view own : {"content-length", "transfer-encoding", "connection", "upgrade", "expect", "te",
                               "trailer", "keep-alive", "proxy-connection", "host"}) {
    if (name.size() == own.size() &&
        std::equal(name.begin(), name.end(), own.begin(), [](char a, char b) { return (a | 0x20) == b; })) {
      return "\"" + std::string(name) + "\" is set by stealgate itself" +
             (own == "host" ? std::string(" (use rewrite.host)") : std::string());
    }
  }
  return {};
}

namespace {

void validate(Ctx& ctx, const YAML::Node& root, Config& c) {
  auto named = [&](const char* section, auto& items) {
    std::set<std::string> seen;
    YAML::Node list = root[section];
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string& name = items[i].name;
      YAML::Node at = list.IsSequence() && i < list.size() ? list[i] : root;
      if (name.empty()) continue;
      if (!seen.insert(name).second) {
        YAML::Node nn = at.IsMap() ? at["name"] : at;
        ctx.error(nn, index(section, i) + ".name", "duplicate name \"" + name + "\"");
      }
    }
  };
  named("listeners", c.listeners);
  named("clusters", c.clusters);
  named("routes", c.routes);

  if (c.listeners.empty()) ctx.error(root, "listeners", "at least one listener is required");
  std::set<std::string> addrs;
  if (c.admin.enabled) addrs.insert(c.admin.address.text());
  for (std::size_t i = 0; i < c.listeners.size(); ++i) {
    auto& l = c.listeners[i];
    if (l.name.empty()) l.name = "listener" + std::to_string(i);
    if (l.address.port != 0 && !addrs.insert(l.address.text()).second) {
      ctx.error(root["listeners"][i]["address"], index("listeners", i) + ".address",
                "address " + l.address.text() + " is already used by another listener or the admin endpoint");
    }
  }
  std::vector<std::string> cluster_names, listener_names;
  for (const auto& cl : c.clusters) cluster_names.push_back(cl.name);
  for (const auto& l : c.listeners) listener_names.push_back(l.name);
  for (std::size_t i = 0; i < c.routes.size(); ++i) {
    auto& r = c.routes[i];
    if (r.name.empty()) r.name = "route" + std::to_string(i);
    if (!r.cluster.empty() && c.find_cluster(r.cluster) == nullptr) {
      ctx.error(root["routes"][i]["cluster"], index("routes", i) + ".cluster",
                "unknown cluster \"" + r.cluster + "\"" + detail::did_you_mean(r.cluster, cluster_names));
    }
    for (const auto& ln : r.match.listeners) {
      if (std::find(listener_names.begin(), listener_names.end(), ln) == listener_names.end()) {
        ctx.error(root["routes"][i]["match"]["listener"], index("routes", i) + ".match.listener",
                  "unknown listener \"" + ln + "\"" + detail::did_you_mean(ln, listener_names));
      }
    }
  }
}

LoadResult load_node(const YAML::Node& root, Ctx& ctx, const std::string& name) {
  LoadResult res;
  auto cfg = std::make_shared<Config>();
  cfg->source = name;
  if (!root.IsDefined() || root.IsNull()) {
    ctx.error(root, "", "the configuration is empty");
  } else {
    detail::config_table().read(ctx, root, "", *cfg);
    if (root.IsMap()) validate(ctx, root, *cfg);
  }
  res.errors = std::move(ctx.errors);
  // In file order, which is how an operator reads and fixes them.
  std::stable_sort(res.errors.begin(), res.errors.end(), [](const ConfigError& a, const ConfigError& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  if (res.errors.empty()) res.config = std::move(cfg);
  return res;
}

}  // namespace

LoadResult load_string(const std::string& yaml, const std::string& name) {
  Ctx ctx;
  ctx.file = name;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::ParserException& e) {
    ctx.error(e.mark, "", e.msg);
    LoadResult r;
    r.errors = std::move(ctx.errors);
    return r;
  }
  try {
    return load_node(root, ctx, name);
  } catch (const YAML::Exception& e) {
    ctx.error(e.mark, "", e.msg);
    LoadResult r;
    r.errors = std::move(ctx.errors);
    return r;
  }
}

LoadResult load_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    LoadResult r;
    r.errors.push_back({path, 0, 0, "", "cannot open file"});
    return r;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return load_string(ss.str(), path);
}

}  // namespace sg::config
