// The TrainingJob the controller's unit tests build objects from: ns/mnist, two tj-trainer
// workers, no evaluator.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tj::controller {

inline nlohmann::json TestJob(const std::string& uid = "uid-1") {
  using nlohmann::json;
  return {{"apiVersion", "tjo.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", "mnist"}, {"namespace", "ns"}, {"uid", uid}}},
          {"spec",
           {{"replicaSpecs",
             {{"Worker",
               {{"replicas", 2},
                {"template",
                 {{"spec",
                   {{"containers", json::array({{{"name", "trainer"},
                                                 {"image", "tj-trainer"},
                                                 {"args", {"--epochs", "2"}}}})}}}}}}}}}}}};
}

}  // namespace tj::controller
