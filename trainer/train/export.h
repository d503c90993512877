// The exported final model: DIR/architecture.json (the model's description, the weights'
// layout and digest) and DIR/weights.tjckpt (a state file holding the tensor "weights"). A
// declared model's export adds DIR/model.json (its Keras JSON as given), DIR/model.weights.h5
// (its weights as Keras 3 saves them) and, when the model has BatchNormalization, the tensor
// "model_state" (the moving statistics).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/train/declared_model.h"

namespace tj::train {

Status ExportModel(const std::string& dir, const std::vector<float>& weights, int epochs);

// Reads an exported model and checks it is this trainer's architecture; returns the weights.
// Both files are read with checkpoint::ReadVolumeFile (a FIFO, a link, an oversized file is an
// error naming it, never a wait); "weights_file" must name a file in `dir`.
// An export of a declared model is refused naming it and --model-config.
StatusOr<std::vector<float>> LoadExportedModel(const std::string& dir);

// The export's copy of a declared model's weights as Keras 3's .weights.h5
// (trainer/model/keras_weights.h): model_from_json(model.json).load_weights(this file).
inline constexpr char kKerasWeightsFile[] = "model.weights.h5";

// A declared model's export: architecture.json is DeclaredModelIdentity(model) with
// "model_config": "model.json", "keras_weights_file": kKerasWeightsFile, epochs,
// "weights_file" and "weights_sha256" (of the weights in the layout of
// trainer/model/graph.h).
Status ExportDeclaredModel(const std::string& dir, const DeclaredModel& model,
                           const std::vector<float>& weights, const std::vector<float>& state,
                           int epochs);

struct DeclaredWeights {
  std::vector<float> weights;
  std::vector<float> state;  // empty when the model has none
};

// Reads an export of `model` (the same model_sha256; otherwise an error naming both models and
// what to do), with LoadExportedModel's checks of the files.
StatusOr<DeclaredWeights> LoadExportedDeclaredModel(const std::string& dir,
                                                    const DeclaredModel& model);

}  // namespace tj::train
