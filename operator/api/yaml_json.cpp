#include "operator/api/yaml_json.h"

#include <cerrno>
#include <cstdlib>

namespace tj::api {

using nlohmann::json;

namespace {

// A limit of the conversion passed: an alias that contains itself, nesting deeper than
// kMaxYamlDepth, or more than kMaxYamlNodes nodes or kMaxYamlBytes bytes of keys and scalars
// once aliases are expanded.
struct YamlLimit {
  std::string what;
};

class BoundedConverter {
 public:
  json Convert(const YAML::Node& n, size_t depth) {
    if (depth > kMaxYamlDepth) {
      throw YamlLimit{"nested deeper than " + std::to_string(kMaxYamlDepth) +
                      " levels (an alias that contains itself?)"};
    }
    if (++nodes_ > kMaxYamlNodes) {
      throw YamlLimit{"more than " + std::to_string(kMaxYamlNodes) +
                      " values once its aliases are expanded (aliases of aliases?)"};
    }
    switch (n.Type()) {
      case YAML::NodeType::Map: {
        json o = json::object();
        for (const auto& kv : n) {
          std::string key = kv.first.as<std::string>();
          CountBytes(key.size());
          o[std::move(key)] = Convert(kv.second, depth + 1);
        }
        return o;
      }
      case YAML::NodeType::Sequence: {
        json a = json::array();
        for (const auto& v : n) a.push_back(Convert(v, depth + 1));
        return a;
      }
      case YAML::NodeType::Scalar:
        CountBytes(n.Scalar().size());
        return Scalar(n);
      default:
        return nullptr;
    }
  }

 private:
  static json Scalar(const YAML::Node& n) {
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

  void CountBytes(size_t n) {
    bytes_ += n;
    if (bytes_ > kMaxYamlBytes) {
      throw YamlLimit{"more than " + std::to_string(kMaxYamlBytes >> 20) +
                      " MiB of keys and values once its aliases are expanded (an alias of a "
                      "large value, repeated?)"};
    }
  }

  size_t nodes_ = 0;
  size_t bytes_ = 0;
};

}  // namespace

StatusOr<json> YamlToJson(const YAML::Node& node) {
  try {
    return BoundedConverter().Convert(node, 0);
  } catch (const YamlLimit& e) {
    return Status::Error("the document is " + e.what + "; a manifest is a plain tree");
  }
}

StatusOr<std::vector<json>> ParseManifests(const std::string& text) {
  std::vector<json> out;
  try {
    int index = 0;
    for (const auto& doc : YAML::LoadAll(text)) {
      ++index;
      if (doc.IsNull()) continue;
      auto j = YamlToJson(doc);
      if (!j.ok()) return j.status().WithContext("document " + std::to_string(index));
      out.push_back(std::move(*j));
    }
  } catch (const YAML::Exception& e) {
    return Status::Error("not YAML or JSON: " + std::string(e.what()));
  }
  return out;
}

}  // namespace tj::api
