// A declared model's weights as Keras 3's `.weights.h5` file: what `model.save_weights(
// "x.weights.h5")` writes and `model.load_weights` reads, so weights trained here load into
// the same Keras model and a Keras model's weights start a training run here.
//
// The file (HDF5, through the HDF5 C library): a group `layers`, and in it one group per layer
// of `model.layers` (every layer but the InputLayer, in the JSON's order) named as Keras names
// it: the snake_case of the layer's class ("conv2d", "batch_normalization", "re_lu"), with
// "_1", "_2", ... for the second and later layers of one class; each holds a group `vars`
// (attribute "name": the layer's name) of float32 datasets "0", "1", ... in Keras' shapes: the
// layer's trainable variables then its non-trainable ones (Conv2D kernel, bias; Dense kernel,
// bias; BatchNormalization gamma, beta, moving_mean, moving_variance), whether the layer is
// frozen or not. A top-level group `vars` (attribute "name": the model's name) holds the model's
// own variables: none. Keras addresses a layer by that path, not by its name (names are made
// up anew in each Python session), and so does this reader; the name attribute is for
// messages.
//
// Not thread-safe: Debian's HDF5 is built without thread safety, so call these from one thread
// at a time.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/model/graph.h"

namespace tj::model {

// The path of each layer's group in the file ("layers/conv2d", "layers/dense_1"), by index into
// Graph::layers; "" for the input layer, which has none.
std::vector<std::string> KerasWeightPaths(const Graph& graph);

// The file's bytes for the graph's `params` (parameter_count floats) and `state` (state_count).
StatusOr<std::string> EncodeKerasWeights(const Graph& graph, const std::vector<float>& params,
                                         const std::vector<float>& state);

struct KerasWeights {
  std::vector<float> params;  // parameter_count floats, graph.h's layout
  std::vector<float> state;   // state_count floats
};

// Reads a `.weights.h5` file's bytes into the graph's layout. Every layer's variables must be
// there with the graph's shapes, and nothing else under `layers`: a missing, extra or
// mis-shaped variable, a dataset that is not floating point, bytes that are not HDF5 are
// refused naming the layer (its path and name), the variable, both shapes and what to do.
// Variables of another floating-point type are converted to float32 as Keras would.
StatusOr<KerasWeights> DecodeKerasWeights(const Graph& graph, const std::string& bytes);

}  // namespace tj::model
