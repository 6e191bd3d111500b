#include "config/yaml_walk.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <optional>

namespace sg::config::detail {

void Ctx::error(const YAML::Node& at, const std::string& path, std::string message) {
  error(at.IsDefined() ? at.Mark() : YAML::Mark::null_mark(), path, std::move(message));
}

void Ctx::error(const YAML::Mark& at, const std::string& path, std::string message) {
  ConfigError e;
  e.file = file;
  // A problem with no node of its own (an empty file) is placed at the document's start:
  // every error names file:line:column.
  e.line = at.is_null() ? 1 : at.line + 1;
  e.column = at.is_null() ? 1 : at.column + 1;
  e.path = path;
  e.message = std::move(message);
  errors.push_back(std::move(e));
}

std::string child(const std::string& base, std::string_view key) {
  return base.empty() ? std::string(key) : base + "." + std::string(key);
}

std::string index(const std::string& base, std::size_t i) { return base + "[" + std::to_string(i) + "]"; }

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: return "\"" + n.Scalar() + "\"";
    default: return "nothing";
  }
}

}  // namespace

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  std::size_t limit = std::max<std::size_t>(1, std::min<std::size_t>(3, word.size() / 3 + 1));
  if (best.empty() || best_d > limit) return "";
  return " (did you mean \"" + best + "\"?)";
}

bool scalar(Ctx& ctx, const YAML::Node& n, const std::string& path, std::string& out) {
  if (!n.IsScalar()) {
    ctx.error(n, path, "expected a value, got " + describe(n));
    return false;
  }
  out = n.Scalar();
  return true;
}

MapView::MapView(Ctx& ctx, const YAML::Node& node, std::string path, std::vector<std::string> allowed)
    : ctx_(ctx), node_(node), path_(std::move(path)) {
  if (!node.IsDefined() || node.IsNull()) return;  // absent section: all defaults
  if (!node.IsMap()) {
    ctx.error(node, path_.empty() ? "(top level)" : path_, "expected a mapping, got " + describe(node));
    ok_ = false;
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    // A copy: `it->first` lives in a proxy object that dies with this statement.
    const YAML::Node k = it->first;
    if (!k.IsScalar()) {
      ctx.error(k, path_, "keys must be plain names");
      ok_ = false;
      continue;
    }
    const std::string& key = k.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      ctx.error(k, child(path_, key), "unknown key \"" + key + "\"" + did_you_mean(key, allowed));
      ok_ = false;
      continue;
    }
    if (entries_.count(key) != 0) {
      ctx.error(k, child(path_, key), "duplicate key \"" + key + "\"");
      ok_ = false;
      continue;
    }
    entries_.emplace(key, Entry{k, it->second});
  }
}

YAML::Node MapView::at(std::string_view key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return node_;
  return it->second.value.IsNull() ? it->second.key : it->second.value;
}

YAML::Node MapView::get(std::string_view key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? YAML::Node(YAML::NodeType::Undefined) : it->second.value;
}

bool MapView::read(std::string_view key, std::string& out) const {
  YAML::Node n = get(key);
  if (!n.IsDefined()) return true;
  return scalar(ctx_, n, path(key), out);
}

namespace {
std::optional<bool> flag_value(const std::string& s) {
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  return std::nullopt;
}
}  // namespace

bool MapView::read(std::string_view key, bool& out) const {
  YAML::Node n = get(key);
  if (!n.IsDefined()) return true;
  std::string s;
  if (!scalar(ctx_, n, path(key), s)) return false;
  const std::optional<bool> v = flag_value(s);
  if (!v) {
    ctx_.error(n, path(key), "expected true or false, got \"" + s + "\"");
    return false;
  }
  out = *v;
  return true;
}

bool MapView::read(std::string_view key, AutoFlag& out) const {
  YAML::Node n = get(key);
  if (!n.IsDefined()) return true;
  std::string s;
  if (!scalar(ctx_, n, path(key), s)) return false;
  const std::optional<bool> v = flag_value(s);
  if (s != "auto" && !v) {
    ctx_.error(n, path(key), "expected auto, true or false, got \"" + s + "\"");
    return false;
  }
  out = s == "auto" ? AutoFlag::kAuto : *v ? AutoFlag::kOn : AutoFlag::kOff;
  return true;
}

bool MapView::read_uint(std::string_view key, uint64_t& out, uint64_t min, uint64_t max) const {
  YAML::Node n = get(key);
  if (!n.IsDefined()) return true;
  std::string s;
  if (!scalar(ctx_, n, path(key), s)) return false;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) {
    ctx_.error(n, path(key), "expected a whole number, got \"" + s + "\"");
    return false;
  }
  if (v < min || v > max) {
    ctx_.error(n, path(key), "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                                 ", got " + s);
    return false;
  }
  out = v;
  return true;
}

bool parse_duration(std::string_view text, Duration& out) {
  if (text.empty()) return false;
  if (text == "0") {
    out = Duration{0};
    return true;
  }
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return false;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + i, v);
  if (ec != std::errc()) return false;
  std::string_view unit = text.substr(i);
  double ms;
  if (unit == "ms") ms = static_cast<double>(v);
  else if (unit == "s") ms = static_cast<double>(v) * 1e3;
  else if (unit == "m") ms = static_cast<double>(v) * 60e3;
  else if (unit == "h") ms = static_cast<double>(v) * 3600e3;
  else return false;
  if (ms > 365.0 * 24 * 3600e3) return false;
  out = Duration{static_cast<int64_t>(ms)};
  return true;
}

bool MapView::read_duration(std::string_view key, Duration& out) const {
  YAML::Node n = get(key);
  if (!n.IsDefined()) return true;
  std::string s;
  if (!scalar(ctx_, n, path(key), s)) return false;
  if (!parse_duration(s, out)) {
    ctx_.error(n, path(key), "invalid duration \"" + s + "\" (use e.g. 250ms, 10s, 5m, 1h)");
    return false;
  }
  return true;
}

bool parse_size(std::string_view text, uint64_t& out) {
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) return false;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + i, v);
  if (ec != std::errc()) return false;
  std::string_view unit = text.substr(i);
  uint64_t mult;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB") mult = 1ull << 10;
  else if (unit == "MiB") mult = 1ull << 20;
  else if (unit == "GiB") mult = 1ull << 30;
  else if (unit == "KB" || unit == "k") mult = 1000;
  else if (unit == "MB") mult = 1000 * 1000;
  else if (unit == "GB") mult = 1000ull * 1000 * 1000;
  else return false;
  if (v > std::numeric_limits<uint64_t>::max() / mult) return false;
  out = v * mult;
  return true;
}

bool MapView::read_size(std::string_view key, uint64_t& out) const {
  YAML::Node n = get(key);
  if (!n.IsDefined()) return true;
  std::string s;
  if (!scalar(ctx_, n, path(key), s)) return false;
  if (!parse_size(s, out)) {
    ctx_.error(n, path(key), "invalid size \"" + s + "\" (use e.g. 8192, 32KiB, 1MiB)");
    return false;
  }
  return true;
}

bool parse_address(std::string_view text, Address& out, std::string& why) {
  std::string_view host, port;
  if (!text.empty() && text.front() == '[') {
    std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      why = "expected [ipv6]:port";
      return false;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      why = "expected host:port";
      return false;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      why = "IPv6 addresses need brackets: [::1]:8080";
      return false;
    }
  }
  if (host.empty()) {
    why = "missing host (use 0.0.0.0 for all interfaces)";
    return false;
  }
  for (char c : host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_')) {
      why = "invalid host \"" + std::string(host) + "\"";
      return false;
    }
  }
  unsigned p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || p > 65535) {
    why = "invalid port \"" + std::string(port) + "\"";
    return false;
  }
  out.host = std::string(host);
  out.port = static_cast<uint16_t>(p);
  return true;
}

bool MapView::read_address(std::string_view key, Address& out) const {
  YAML::Node n = get(key);
  if (!n.IsDefined()) return true;
  std::string s, why;
  if (!scalar(ctx_, n, path(key), s)) return false;
  if (!parse_address(s, out, why)) {
    ctx_.error(n, path(key), "invalid address \"" + s + "\": " + why);
    return false;
  }
  return true;
}

bool MapView::read_strings(std::string_view key, std::vector<std::string>& out) const {
  YAML::Node n = get(key);
  if (!n.IsDefined()) return true;
  if (n.IsScalar()) {
    out = {n.Scalar()};
    return true;
  }
  if (!n.IsSequence()) {
    ctx_.error(n, path(key), "expected a list, got " + describe(n));
    return false;
  }
  out.clear();
  bool ok = true;
  for (std::size_t i = 0; i < n.size(); ++i) {
    std::string s;
    if (scalar(ctx_, n[i], index(path(key), i), s)) out.push_back(s);
    else ok = false;
  }
  return ok;
}

std::string format_duration(Duration d) {
  const auto ms = d.count();
  if (ms == 0) return "0";
  if (ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::string format_size(uint64_t bytes) {
  if (bytes == 0) return "0";
  for (auto [shift, unit] : {std::pair{30, "GiB"}, std::pair{20, "MiB"}, std::pair{10, "KiB"}}) {
    if (bytes % (1ull << shift) == 0) return std::to_string(bytes >> shift) + unit;
  }
  return std::to_string(bytes);
}

std::string not_absolute_path(const std::string& path) {
  return !path.empty() && path.front() == '/' ? "" : "must start with /";
}

std::string config_relative(const Ctx& ctx, const std::string& file) {
  if (file.empty() || file.front() == '/') return file;
  const std::size_t slash = ctx.file.rfind('/');
  return slash == std::string::npos ? file : ctx.file.substr(0, slash + 1) + file;
}

void for_each_item(Ctx& ctx, const YAML::Node& n, const std::string& path,
                   const std::function<void(const YAML::Node&, const std::string&)>& f) {
  if (!n.IsDefined() || n.IsNull()) return;
  if (!n.IsSequence()) {
    ctx.error(n, path, "expected a list");
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    // "- " with nothing after it (or only a comment) would otherwise be an entry of
    // defaults that skipped every check of its section. Reported where the list starts
    // (yaml-cpp places an empty item at the token after it), with the item's index.
    if (n[i].IsNull()) {
      ctx.error(n, index(path, i), "an empty list item (a mapping is expected)");
      continue;
    }
    f(n[i], index(path, i));
  }
}

}  // namespace sg::config::detail
