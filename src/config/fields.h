// Configuration keys declared once. Each section of stealgate.yaml is a Table: one Field per
// key, holding the key, what it means (the reference's text), how it is read and checked,
// and how it is printed. The loader, --print-config / the admin /config page and the
// reference tables in config/README.md all walk the same tables, so adding a key is one
// edit (plus its member and default in schema.h). Internal to src/config.
//
// A field reaches its member through `get`: a pointer to a data member (&ListenerSection::
// backlog) or a callable returning a reference (for members of members); std::invoke gives
// a reference of the right constness either way. Defaults are the member initializers in
// schema.h; the reference prints them from a default-constructed section.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <optional>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "config/yaml_walk.h"

namespace sg::config::detail {

struct ReferenceRow {
  std::string key;
  std::string shown_default;  // markdown
  std::string doc;
};

struct ReferenceTable {
  std::string name;  // "listeners[].tls"
  std::vector<ReferenceRow> rows;
};

template <class S>
struct Field {
  std::string key;
  std::string doc;
  std::string shown_default;  // markdown for the reference; "" = the printed default value
  bool required = false;
  std::function<void(const MapView&, S&)> read;          // read and check the key, when present
  std::function<void(YAML::Emitter&, const S&)> emit;    // "key: value", or nothing when absent

  Field require() && {
    required = true;
    return std::move(*this);
  }
  Field shown(std::string markdown) && {
    shown_default = std::move(markdown);
    return std::move(*this);
  }
};

// Rules across the keys of a section run after all of them were read.
template <class S>
using SectionCheck = std::function<void(const MapView&, S&)>;

template <class S>
struct Table {
  Table(std::string table_name, std::vector<Field<S>> table_fields, SectionCheck<S> section_check = nullptr)
      : name(std::move(table_name)), fields(std::move(table_fields)), check(std::move(section_check)) {}

  std::string name;
  std::vector<Field<S>> fields;
  SectionCheck<S> check;

  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& f : fields) out.push_back(f.key);
    return out;
  }

  // Reads a mapping into `s`. Absent or null: every default (and the section's checks).
  void read(Ctx& ctx, const YAML::Node& node, const std::string& path, S& s) const {
    MapView m(ctx, node, path, keys());
    if (node.IsDefined() && !node.IsNull() && !node.IsMap()) return;  // reported by MapView
    for (const auto& f : fields) {
      if (f.required && node.IsDefined() && !present(m.get(f.key))) {
        ctx.error(node, path, "missing required key \"" + f.key + "\"");
      }
      f.read(m, s);
    }
    if (check) check(m, s);
  }

  void emit(YAML::Emitter& e, const S& s) const {
    for (const auto& f : fields) f.emit(e, s);
  }

  ReferenceTable reference() const {
    ReferenceTable t{name, {}};
    const S defaults;
    for (const auto& f : fields) {
      std::string shown = f.shown_default;
      if (shown.empty()) shown = f.required ? "required" : printed_default(f, defaults);
      t.rows.push_back({f.key, shown, f.doc});
    }
    return t;
  }

 private:
  static bool present(const YAML::Node& n) {
    return n.IsDefined() && !n.IsNull() && !(n.IsScalar() && n.Scalar().empty());
  }
  static std::string printed_default(const Field<S>& f, const S& defaults) {
    YAML::Emitter e;
    e << YAML::Flow << YAML::BeginMap;
    f.emit(e, defaults);
    e << YAML::EndMap;
    std::string text = e.c_str();  // "{key: value}" or "{}"
    const std::string prefix = "{" + f.key + ": ";
    if (text.rfind(prefix, 0) != 0) return "—";
    return "`" + text.substr(prefix.size(), text.size() - prefix.size() - 1) + "`";
  }
};

// "must start with /"-style refusals of a value: "" when fine.
using Refusal = std::function<std::string(const std::string&)>;

template <class S>
struct Fields {
  using F = Field<S>;

  template <class Get>
  static F flag(std::string key, Get get, std::string doc) {
    return {key, std::move(doc), "", false,
            [key, get](const MapView& m, S& s) { m.read(key, std::invoke(get, s)); },
            [key, get](YAML::Emitter& e, const S& s) { e << YAML::Key << key << YAML::Value << std::invoke(get, s); }};
  }

  // `auto`, `true` or `false` (and a flag's other words: yes/no, on/off).
  template <class Get>
  static F auto_flag(std::string key, Get get, std::string doc) {
    return {key, std::move(doc), "", false,
            [key, get](const MapView& m, S& s) { m.read(key, std::invoke(get, s)); },
            [key, get](YAML::Emitter& e, const S& s) {
              const AutoFlag v = std::invoke(get, s);
              e << YAML::Key << key << YAML::Value;
              if (v == AutoFlag::kAuto) e << "auto";
              else e << (v == AutoFlag::kOn);
            }};
  }

  template <class Get>
  static F number(std::string key, Get get, uint64_t min, uint64_t max, std::string doc) {
    return {key, std::move(doc), "", false,
            [=](const MapView& m, S& s) { m.read_num(key, std::invoke(get, s), min, max); },
            [=](YAML::Emitter& e, const S& s) { e << YAML::Key << key << YAML::Value << std::invoke(get, s); }};
  }

  // A duration of at least `min`.
  template <class Get>
  static F duration(std::string key, Get get, std::string doc, Duration min = Duration{0}) {
    return {key, std::move(doc), "", false,
            [=](const MapView& m, S& s) {
              Duration& d = std::invoke(get, s);
              if (m.read_duration(key, d) && m.has(key) && d < min) {
                m.ctx().error(m.get(key), m.path(key), "must be at least " + format_duration(min));
              }
            },
            [=](YAML::Emitter& e, const S& s) {
              e << YAML::Key << key << YAML::Value << format_duration(std::invoke(get, s));
            }};
  }

  template <class Get>
  static F size(std::string key, Get get, std::string doc) {
    return {key, std::move(doc), "", false,
            [=](const MapView& m, S& s) {
              auto& out = std::invoke(get, s);
              uint64_t v = out;
              if (m.read_size(key, v)) out = static_cast<std::remove_reference_t<decltype(out)>>(v);
            },
            [=](YAML::Emitter& e, const S& s) {
              e << YAML::Key << key << YAML::Value << format_size(std::invoke(get, s));
            }};
  }

  // A string; printed only when not empty. `refusal` checks a non-empty value.
  template <class Get>
  static F text(std::string key, Get get, std::string doc, Refusal refusal = nullptr) {
    return {key, std::move(doc), "", false,
            [=](const MapView& m, S& s) {
              std::string& v = std::invoke(get, s);
              if (!m.read(key, v) || !m.has(key) || v.empty() || !refusal) return;
              if (std::string why = refusal(v); !why.empty()) m.ctx().error(m.get(key), m.path(key), why);
            },
            [=](YAML::Emitter& e, const S& s) {
              const std::string& v = std::invoke(get, s);
              if (!v.empty()) e << YAML::Key << key << YAML::Value << v;
            }};
  }

  // A file name, resolved against the configuration file's directory, then checked.
  template <class Get>
  static F file(std::string key, Get get, std::string doc, Refusal check = nullptr) {
    F f = text(key, get, std::move(doc));
    f.read = [=](const MapView& m, S& s) {
      std::string& v = std::invoke(get, s);
      if (!m.read(key, v) || !m.has(key) || v.empty()) return;
      v = config_relative(m.ctx(), v);
      if (!check) return;
      if (std::string why = check(v); !why.empty()) m.ctx().error(m.get(key), m.path(key), why);
    };
    return f;
  }

  template <class Get>
  static F address(std::string key, Get get, std::string doc) {
    return {key, std::move(doc), "", false,
            [=](const MapView& m, S& s) { m.read_address(key, std::invoke(get, s)); },
            [=](YAML::Emitter& e, const S& s) {
              e << YAML::Key << key << YAML::Value << std::invoke(get, s).text();  // port 0 too: "any free port"
            }};
  }

  // One of a fixed set of words.
  template <class Get, class E>
  static F choice(std::string key, Get get, std::vector<std::pair<std::string, E>> words, std::string doc) {
    return {key, std::move(doc), "", false,
            [=](const MapView& m, S& s) {
              std::string v;
              if (!m.read(key, v) || !m.has(key)) return;
              if (auto value = word_value(words, v)) std::invoke(get, s) = *value;
              else m.ctx().error(m.get(key), m.path(key), expected_words(words, v));
            },
            [=](YAML::Emitter& e, const S& s) {
              e << YAML::Key << key << YAML::Value << value_word(words, std::invoke(get, s));
            }};
  }

  // A list of words from a fixed set.
  template <class Get, class E>
  static F choices(std::string key, Get get, std::vector<std::pair<std::string, E>> words, std::string doc) {
    return {key, std::move(doc), "", false,
            [=](const MapView& m, S& s) {
              std::vector<std::string> list;
              if (!m.has(key) || !m.read_strings(key, list)) return;
              auto& out = std::invoke(get, s);
              out.clear();
              for (std::size_t i = 0; i < list.size(); ++i) {
                if (auto value = word_value(words, list[i])) out.push_back(*value);
                else m.ctx().error(m.get(key), index(m.path(key), i), expected_words(words, list[i]));
              }
            },
            [=](YAML::Emitter& e, const S& s) {
              std::vector<std::string> list;
              for (const E& v : std::invoke(get, s)) list.push_back(value_word(words, v));
              e << YAML::Key << key << YAML::Value << YAML::Flow << list;
            }};
  }

  // A list of strings (a single string is a list of one). `item` may rewrite an item and
  // returns why it is refused ("" = fine). Printed always, or only when not empty.
  template <class Get>
  static F strings(std::string key, Get get, std::string doc, std::function<std::string(std::string&)> item = nullptr,
                   bool print_empty = true) {
    return {key, std::move(doc), "", false,
            [=](const MapView& m, S& s) {
              auto& list = std::invoke(get, s);
              if (!m.has(key) || !m.read_strings(key, list) || !item) return;
              for (std::string& v : list) {
                if (std::string why = item(v); !why.empty()) m.ctx().error(m.get(key), m.path(key), why);
              }
            },
            [=](YAML::Emitter& e, const S& s) {
              const auto& list = std::invoke(get, s);
              if (print_empty || !list.empty()) e << YAML::Key << key << YAML::Value << YAML::Flow << list;
            }};
  }

  // A nested mapping read into a member. `printed` says whether to print it (default: always).
  template <class Get, class Sub>
  static F section(std::string key, Get get, const Table<Sub>& table, std::string doc,
                   std::type_identity_t<std::function<bool(const Sub&)>> printed = nullptr) {
    return F{key, std::move(doc), "", false,
             [key, get, t = &table](const MapView& m, S& s) {
               if (m.has(key)) t->read(m.ctx(), m.get(key), m.path(key), std::invoke(get, s));
             },
             [key, get, t = &table, printed](YAML::Emitter& e, const S& s) {
               const Sub& sub = std::invoke(get, s);
               if (printed && !printed(sub)) return;
               e << YAML::Key << key << YAML::Value << YAML::BeginMap;
               t->emit(e, sub);
               e << YAML::EndMap;
             }}
        .shown("see `" + table.name + "`");
  }

  // A nested mapping whose presence means something: absent leaves the member empty.
  template <class Get, class Sub>
  static F optional_section(std::string key, Get get, const Table<Sub>& table, std::string doc) {
    return F{key, std::move(doc), "", false,
             [key, get, t = &table](const MapView& m, S& s) {
               if (!m.has(key)) return;
               std::optional<Sub>& out = std::invoke(get, s);
               out.emplace();
               t->read(m.ctx(), m.get(key), m.path(key), *out);
             },
             [key, get, t = &table](YAML::Emitter& e, const S& s) {
               const std::optional<Sub>& sub = std::invoke(get, s);
               if (!sub) return;
               e << YAML::Key << key << YAML::Value << YAML::BeginMap;
               t->emit(e, *sub);
               e << YAML::EndMap;
             }}
        .shown("absent");
  }

  // A list of mappings. `from_scalar` reads an item written as one word (an endpoint's
  // "host:port"); `empty_error`, when set, refuses an absent, null or empty list.
  template <class Get, class Item>
  static F list(std::string key, Get get, const Table<Item>& table, std::string doc, std::string empty_error = "",
                std::type_identity_t<std::function<bool(Ctx&, const YAML::Node&, const std::string&, Item&)>>
                   from_scalar = nullptr,
                bool flow_items = false) {
    return F{key, std::move(doc), "", false,
             [=, t = &table](const MapView& m, S& s) {
               YAML::Node n = m.get(key);
               // `key:` with nothing after it is a null node: as empty as `[]`, not absent-and-fine.
               const bool empty = !n.IsDefined() || n.IsNull() || (n.IsSequence() && n.size() == 0);
               if (!empty_error.empty() && empty) {
                 m.ctx().error(m.at(key), m.path(key), empty_error);
               }
               auto& out = std::invoke(get, s);
               for_each_item(m.ctx(), n, m.path(key), [&](const YAML::Node& item, const std::string& path) {
                 Item value;
                 if (item.IsScalar() && from_scalar) {
                   if (from_scalar(m.ctx(), item, path, value)) out.push_back(std::move(value));
                   return;
                 }
                 t->read(m.ctx(), item, path, value);
                 if (item.IsMap()) out.push_back(std::move(value));
               });
             },
             [=, t = &table](YAML::Emitter& e, const S& s) {
               e << YAML::Key << key << YAML::Value << YAML::BeginSeq;
               for (const Item& item : std::invoke(get, s)) {
                 if (flow_items) e << YAML::Flow;
                 e << YAML::BeginMap;
                 t->emit(e, item);
                 e << YAML::EndMap;
               }
               e << YAML::EndSeq;
             }}
        .shown("`[]`");
  }

  // A key with its own reading and printing.
  static F custom(std::string key, std::string doc, std::function<void(const MapView&, S&)> read,
                  std::function<void(YAML::Emitter&, const S&)> emit) {
    return {std::move(key), std::move(doc), "", false, std::move(read), std::move(emit)};
  }

 private:
  template <class E>
  static std::optional<E> word_value(const std::vector<std::pair<std::string, E>>& words, const std::string& v) {
    for (const auto& [word, value] : words) {
      if (word == v) return value;
    }
    return std::nullopt;
  }
  template <class E>
  static std::string value_word(const std::vector<std::pair<std::string, E>>& words, const E& v) {
    for (const auto& [word, value] : words) {
      if (value == v) return word;
    }
    return words.front().first;
  }
  template <class E>
  static std::string expected_words(const std::vector<std::pair<std::string, E>>& words, const std::string& got) {
    std::string expected;
    std::vector<std::string> candidates;
    for (const auto& w : words) {
      expected += (expected.empty() ? "" : " | ") + w.first;
      candidates.push_back(w.first);
    }
    return "expected " + expected + ", got \"" + got + "\"" + did_you_mean(got, candidates);
  }
};

// The markdown of a reference table (the blocks config/README.md holds).
std::string reference_markdown(const ReferenceTable& t);

}  // namespace sg::config::detail
