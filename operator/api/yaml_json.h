// YAML documents as JSON, typed as Kubernetes reads manifests: quoted scalars stay strings;
// unquoted integers, floats, booleans and null get their types.
#pragma once

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::api {

// Bounds of a document, whoever wrote it: no manifest nests deeper, or holds more values, than
// this; a YAML alias can make a short text a huge (or, pointing at itself, endless) tree.
inline constexpr size_t kMaxYamlDepth = 100;
inline constexpr size_t kMaxYamlNodes = size_t{1} << 20;
// Bytes of keys and scalars once aliases are expanded: ten times the largest object the API
// server stores (about 1.5 MiB), so an alias of a large scalar repeated cannot exhaust memory.
inline constexpr size_t kMaxYamlBytes = size_t{16} << 20;

// The document as JSON; an error when it passes a bound above.
StatusOr<nlohmann::json> YamlToJson(const YAML::Node& node);

// Every document of a YAML (or JSON) text, empty documents left out; an error names the line.
StatusOr<std::vector<nlohmann::json>> ParseManifests(const std::string& text);

}  // namespace tj::api
