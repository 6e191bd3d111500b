// Helpers for walking yaml-cpp nodes while collecting errors with positions and paths.
// Internal to src/config.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/loader.h"
#include "config/schema.h"

namespace sg::config::detail {

struct Ctx {
  std::string file;
  std::vector<ConfigError> errors;
  void error(const YAML::Node& at, const std::string& path, std::string message);
  void error(const YAML::Mark& at, const std::string& path, std::string message);
};

std::string child(const std::string& base, std::string_view key);
std::string index(const std::string& base, std::size_t i);
// " (did you mean "x"?)" when a candidate is close to `word`, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// A mapping node with known keys: reports non-mappings, duplicate keys and unknown keys.
class MapView {
 public:
  MapView(Ctx& ctx, const YAML::Node& node, std::string path, std::vector<std::string> allowed);
  bool ok() const { return ok_; }
  // The value node of `key`, or an undefined node.
  YAML::Node get(std::string_view key) const;
  bool has(std::string_view key) const { return get(key).IsDefined(); }
  // Where an error about `key` points: its value, or the key itself when the value is
  // empty (yaml-cpp marks an empty value at whatever token follows it, often lines later).
  YAML::Node at(std::string_view key) const;
  std::string path(std::string_view key) const { return child(path_, key); }
  const std::string& where() const { return path_; }  // this mapping's own path
  const YAML::Node& node() const { return node_; }
  Ctx& ctx() const { return ctx_; }

  // Typed reads: leave `out` unchanged when the key is absent; report and return false
  // on a wrong type or value.
  bool read(std::string_view key, std::string& out) const;
  bool read(std::string_view key, bool& out) const;
  bool read(std::string_view key, AutoFlag& out) const;  // `auto` or a flag's words
  bool read_uint(std::string_view key, uint64_t& out, uint64_t min, uint64_t max) const;
  template <class T>
  bool read_num(std::string_view key, T& out, uint64_t min, uint64_t max) const {
    uint64_t v = static_cast<uint64_t>(out);
    if (!read_uint(key, v, min, max)) return false;
    out = static_cast<T>(v);
    return true;
  }
  bool read_duration(std::string_view key, Duration& out) const;
  bool read_size(std::string_view key, uint64_t& out) const;
  bool read_address(std::string_view key, Address& out) const;
  bool read_strings(std::string_view key, std::vector<std::string>& out) const;

 private:
  Ctx& ctx_;
  YAML::Node node_;
  std::string path_;
  struct Entry {
    YAML::Node key;  // for at()
    YAML::Node value;
  };
  std::map<std::string, Entry, std::less<>> entries_;
  bool ok_ = true;
};

bool scalar(Ctx& ctx, const YAML::Node& n, const std::string& path, std::string& out);
bool parse_duration(std::string_view text, Duration& out);
bool parse_size(std::string_view text, uint64_t& out);
bool parse_address(std::string_view text, Address& out, std::string& why);
// The forms the loader reads back: "250ms", "10s", "5m", "1h", "0"; "16KiB", "64MiB", "1000".
std::string format_duration(Duration d);
std::string format_size(uint64_t bytes);

// A refusal of a path that does not start with '/' ("" when it does).
std::string not_absolute_path(const std::string& path);

// A file named in the configuration: a relative name is relative to the file's directory.
std::string config_relative(const Ctx& ctx, const std::string& file);

// Calls f(item, path) for each item of a list node (absent = empty), reporting a non-list
// and empty items.
void for_each_item(Ctx& ctx, const YAML::Node& n, const std::string& path,
                   const std::function<void(const YAML::Node&, const std::string&)>& f);

}  // namespace sg::config::detail
