#include "operator/api/yaml_json.h"

#include <cerrno>
#include <cstdlib>

namespace tj::api {

using nlohmann::json;

json YamlToJson(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& v : n) a.push_back(YamlToJson(v));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted
      if (s == "true" || s == "false") return s == "true";
      if (s == "null" || s == "~") return nullptr;
      if (!s.empty()) {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (*end == '\0' && errno == 0) return v;
        const double d = std::strtod(s.c_str(), &end);
        if (*end == '\0' && s.find_first_of(".eE") != std::string::npos) return d;
      }
      return s;
    }
    default:
      return nullptr;
  }
}

StatusOr<std::vector<json>> ParseManifests(const std::string& text) {
  std::vector<json> out;
  try {
    for (const auto& doc : YAML::LoadAll(text)) {
      if (doc.IsNull()) continue;
      out.push_back(YamlToJson(doc));
    }
  } catch (const YAML::Exception& e) {
    return Status::Error("not YAML or JSON: " + std::string(e.what()));
  }
  return out;
}

}  // namespace tj::api
