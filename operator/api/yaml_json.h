// YAML documents as JSON, typed as Kubernetes reads manifests: quoted scalars stay strings;
// unquoted integers, floats, booleans and null get their types.
#pragma once

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tj::api {

nlohmann::json YamlToJson(const YAML::Node& node);

// Every document of a YAML (or JSON) text, empty documents left out; an error names the line.
StatusOr<std::vector<nlohmann::json>> ParseManifests(const std::string& text);

}  // namespace tj::api
