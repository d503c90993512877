// A declared model's starting weights from Keras (--initial-weights FILE.weights.h5): a Keras
// model's weights, saved with model.save_weights, start a fresh training run of the same model
// declared in JSON (fine-tuning, transfer learning), in place of the initializers' values.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"
#include "trainer/train/declared_model.h"

namespace tj::train {

// The largest file read beyond the model's own floats (HDF5's headers and groups: about 2 KB
// a layer).
inline constexpr size_t kInitialWeightsSlackBytes = size_t{16} << 20;

// Reads the Keras 3 .weights.h5 at `path` into model->initial_params and initial_state
// (trainer/model/keras_weights.h: every variable matched by Keras' layer path and shape,
// anything missing, extra or mis-shaped refused naming the layer) and its SHA-256 into
// initial_weights_sha256. At most 8 bytes a weight (float64 files) plus
// kInitialWeightsSlackBytes are read. Errors start with "--initial-weights PATH: ".
Status LoadInitialWeights(const std::string& path, DeclaredModel* model);

}  // namespace tj::train
