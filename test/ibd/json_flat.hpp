// Flattens ibdctl's JSON into "path.to.leaf" -> number, so that tests can
// compare what ibd reports before and after without depending on more of
// the layout than the keys they name.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace openib::testing {

inline void flatten_json(const nlohmann::json& j, const std::string& prefix,
                         std::map<std::string, double>& out) {
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) flatten_json(v, prefix.empty() ? k : prefix + "." + k, out);
  } else if (j.is_array()) {
    out[prefix + ".#"] = static_cast<double>(j.size());
    size_t i = 0;
    for (auto& v : j) flatten_json(v, prefix + "[" + std::to_string(i++) + "]", out);
  } else if (j.is_number()) {
    out[prefix] = j.get<double>();
  } else if (j.is_boolean()) {
    out[prefix] = j.get<bool>() ? 1 : 0;
  }
}

inline std::map<std::string, double> flatten_json(const std::string& text) {
  std::map<std::string, double> out;
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) flatten_json(j, "", out);
  return out;
}

}  // namespace openib::testing
