// The exported final model: DIR/architecture.json (the model's description, the weights'
// layout and digest) and DIR/weights.tjckpt (a state file holding the tensor "weights").
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tj::train {

Status ExportModel(const std::string& dir, const std::vector<float>& weights, int epochs);

// Reads an exported model and checks it is this trainer's architecture; returns the weights.
// Both files are read with checkpoint::ReadVolumeFile (a FIFO, a link, an oversized file is an
// error naming it, never a wait); "weights_file" must name a file in `dir`.
StatusOr<std::vector<float>> LoadExportedModel(const std::string& dir);

}  // namespace tj::train
