// Keras 3 model JSON for the tests, written the way `model.to_json()` writes it but with only
// the fields the parser reads (the rest take Keras' defaults), and the example models of
// examples/models/.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace tj::model::testing {

using nlohmann::json;

inline json KerasLayer(const std::string& class_name, json config) {
  return {{"class_name", class_name}, {"config", std::move(config)}};
}

inline json Input(int h, int w, int c) {
  return KerasLayer("InputLayer", {{"name", "input"}, {"batch_shape", {nullptr, h, w, c}}});
}

inline json Sequential(std::vector<json> layers) {
  return {{"class_name", "Sequential"},
          {"config", {{"name", "test"}, {"layers", std::move(layers)}}}};
}

// A Functional model's layer: `inputs` name the layers whose outputs it takes.
inline json Node(const std::string& class_name, json config,
                 const std::vector<std::string>& inputs) {
  json layer = KerasLayer(class_name, std::move(config));
  layer["name"] = layer["config"]["name"];
  json tensors = json::array();
  for (const std::string& name : inputs) {
    tensors.push_back(
        {{"class_name", "__keras_tensor__"}, {"config", {{"keras_history", {name, 0, 0}}}}});
  }
  json args = json::array();
  if (tensors.size() == 1) {
    args.push_back(tensors[0]);
  } else if (!tensors.empty()) {
    args.push_back(tensors);
  }
  layer["inbound_nodes"] =
      inputs.empty() ? json::array() : json::array({{{"args", args}, {"kwargs", json::object()}}});
  return layer;
}

inline json Functional(std::vector<json> layers, const std::string& input,
                       const std::string& output) {
  return {{"class_name", "Functional"},
          {"config",
           {{"name", "test"},
            {"layers", std::move(layers)},
            {"input_layers", {input, 0, 0}},
            {"output_layers", {output, 0, 0}}}}};
}

inline std::string ExampleModelPath(const std::string& name) {
  return std::string(TJ_SOURCE_DIR) + "/examples/models/" + name + ".json";
}

inline json ExampleModel(const std::string& name) {
  std::ifstream in(ExampleModelPath(name));
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

}  // namespace tj::model::testing
