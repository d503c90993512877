// Declared models: a network read from Keras' own model JSON (`model.to_json()` of a Sequential
// or Functional model, Keras 3) as a graph of layers, its shapes inferred and checked, its
// trainable parameters in one flat float32 vector and its non-trainable state (BatchNorm's
// moving statistics) in another, both initialised as Keras initialises them from a seeded,
// deterministic stream. cpu_engine.h runs the graph forward and backward.
//
// Why a library of its own (trainer/model/, tj_model) rather than more of trainer/nn/: nn/ is
// the seeds' fixed model and the SIMD kernels every model shares; a declared model adds a
// parser, a graph and a general engine on top of those kernels. Dependencies point one way
// (model -> nn), so the built-in model's path is untouched; and the parser and the graph are
// pure (text in, values out), tested without a trainer or a dataset.
//
// Supported layers (anything else is refused naming the layer's class and name and listing
// these): InputLayer, Conv2D, DepthwiseConv2D, BatchNormalization, Activation, ReLU,
// MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, Flatten, Dense, Dropout, Add,
// Rescaling, ZeroPadding2D. Activations: linear, relu, relu6 (ReLU's max_value: any cap), softmax
// only on the output layer (there it is folded into the loss: the engine's outputs are the logits
// before it). Inputs are NHWC float32 (or flat vectors); the output is a vector of class logits for
// softmax cross-entropy.
//
// Parameter layout. The parameter vector is, for each layer in the model's layer order (the
// order of the JSON's "layers", which is Keras' `model.layers`), its trainable weights in
// Keras' order, each in Keras' shape, row-major: the numbers of `w.numpy().ravel()`.
//   Conv2D              kernel (kh, kw, in / groups, filters), bias (filters) if use_bias
//   DepthwiseConv2D     kernel (kh, kw, in, depth_multiplier), bias (in * depth_multiplier)
//   Dense               kernel (in, units), bias (units) if use_bias
//   BatchNormalization  gamma (channels) if scale, beta (channels) if center
// The state vector is, in the same layer order, each BatchNormalization's moving_mean and
// moving_variance (channels each). Keras' `model.get_weights()` is, layer by layer, that
// layer's parameters then its state: the two vectors map to it 1:1 (`Graph::KerasWeights`).
//
// Initial values (InitialParameters): every tensor as its Keras initializer says (Zeros, Ones,
// GlorotUniform, HeUniform, LecunUniform, or VarianceScaling with a uniform distribution;
// others are refused). Each random tensor k (counted in layout order from 0) draws from its
// own SplitMix64 stream DeriveSeed(seed, 1001 + k), uniform in [-limit, limit) with Keras'
// fans; a Dense kernel draws its values output-major (unit by unit, each unit's inputs in
// order), as trainer/nn/model.cpp draws its dense kernels, and every other kernel in its
// layout order. So the seeds' CNN declared in JSON starts from exactly the built-in model's
// weights for the same seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tj::model {

enum class LayerType {
  kInput,
  kConv2D,
  kDepthwiseConv2D,
  kBatchNorm,
  kActivation,  // Activation and ReLU
  kMaxPool,
  kAvgPool,
  kGlobalAvgPool,
  kFlatten,
  kDense,
  kDropout,
  kAdd,
  kRescaling,
  kZeroPadding,  // ZeroPadding2D
};

// What follows a layer's linear part. kRelu clips at relu_max (infinity: plain ReLU; 6: ReLU6).
// kSoftmax is only ever the output layer's, and is folded into the loss.
enum class Activation { kLinear, kRelu, kSoftmax };

enum class Padding { kValid, kSame };

// A tensor of one image (the batch dimension aside): h x w x c, row-major (NHWC without N), or
// a flat vector of c features (h = w = 1).
struct Shape {
  int h = 1, w = 1, c = 1;
  bool flat = false;
  size_t size() const { return static_cast<size_t>(h) * w * c; }
  std::string ToString() const;  // "(28, 28, 1)" or "(10,)", as Keras prints shapes
  bool operator==(const Shape&) const = default;
};

// How a tensor starts: constants, or uniform in [-limit, limit).
enum class Init { kZeros, kOnes, kUniform };

// A Keras initializer as the JSON names it: a constant, or VarianceScaling with a uniform
// distribution (GlorotUniform: scale 1, fan_avg; HeUniform: 2, fan_in; LecunUniform: 1,
// fan_in), whose limit is sqrt(3 scale / fan).
struct Initializer {
  enum class Fan { kIn, kOut, kAvg };
  Init init = Init::kZeros;
  float scale = 1.0f;
  Fan fan = Fan::kAvg;
  bool glorot = false;  // GlorotUniform: the limit as trainer/nn/model.cpp computes it
};

// One weight tensor in the parameter or the state vector.
struct Tensor {
  std::string name;        // Keras' path: "conv/kernel", "bn/moving_mean"
  std::vector<int> shape;  // Keras' shape
  size_t offset = 0;       // in floats, into its vector
  size_t size = 0;
  Init init = Init::kZeros;
  float limit = 0.0f;      // kUniform's bound
  bool out_major = false;  // kUniform: draw a (in, out) kernel unit by unit (Dense)
};

struct Layer {
  LayerType type = LayerType::kInput;
  std::string keras_class;  // "Conv2D", "ReLU", ...
  std::string name;
  std::vector<int> inputs;  // indices into Graph::layers (two or more for Add)
  Shape in, out;            // in: the first input's shape (none for the input layer)
  Activation activation = Activation::kLinear;
  float relu_max = std::numeric_limits<float>::infinity();
  // False for a frozen layer ("trainable": false in its config): its parameters are not
  // updated, and a frozen BatchNormalization normalises with its moving statistics and leaves
  // them as they are in training too, as Keras 3 runs a non-trainable BatchNormalization.
  bool trainable = true;

  // Windows: Conv2D, DepthwiseConv2D, MaxPooling2D, AveragePooling2D. Padding "same" pads
  // pad_top / pad_left before and the rest after, as TensorFlow does. ZeroPadding2D pads by
  // all four (rows above and below, columns left and right).
  int kh = 1, kw = 1, sh = 1, sw = 1;
  Padding padding = Padding::kValid;
  int pad_top = 0, pad_left = 0;
  int pad_bottom = 0, pad_right = 0;  // ZeroPadding2D
  int filters = 0;                    // Conv2D's filters, Dense's units
  int groups = 1;                     // Conv2D
  int depth_multiplier = 1;
  bool use_bias = false;

  float epsilon = 1e-3f;   // BatchNormalization
  double momentum = 0.99;  // as the JSON has it: Keras computes 1 - momentum in double
  bool center = true, scale = true;
  float rate = 0.0f;                    // Dropout
  float rescale = 1.0f, offset = 0.0f;  // Rescaling: x * rescale + offset
  bool keepdims = false;                // GlobalAveragePooling2D

  // Initializers of the tensors below, as the JSON names them.
  Initializer kernel_init, bias_init, gamma_init{Init::kOnes}, beta_init, moving_mean_init,
      moving_variance_init{Init::kOnes};

  std::vector<Tensor> params;  // trainable, Keras' order
  std::vector<Tensor> state;   // non-trainable: moving_mean, moving_variance
  // Indices into params (-1: none).
  int kernel = -1, bias = -1, gamma = -1, beta = -1;
};

struct Graph {
  std::string name;
  std::vector<Layer> layers;  // Keras' order: the parameter layout's
  std::vector<int> order;     // execution order: topological, the input first, the output last
  int input = 0, output = 0;
  size_t parameter_count = 0, state_count = 0;
  bool output_softmax = false;  // the output layer's softmax, folded into the loss

  const Shape& input_shape() const { return layers[input].out; }
  int classes() const { return layers[output].out.c; }

  // Keras' `model.get_weights()` order: for each layer its parameters then its state, as
  // (vector, tensor) pairs; vector 0 is the parameters, 1 the state.
  struct WeightRef {
    int vector;
    const Tensor* tensor;
  };
  std::vector<WeightRef> KerasWeights() const;

  // A table of the layers: name, class, output shape, parameters, inputs.
  std::string Summary() const;
};

// The parser's last step: checks that the layers (types, options, inputs by index) form one
// graph from the input to the output, puts them in execution order, infers and checks every
// shape, and lays out the parameter and state tensors. Errors name the layer.
Status FinishGraph(Graph* graph);

// The names of the supported Keras layer classes, for messages.
std::string SupportedLayers();

// Reads Keras' model JSON (`model.to_json()`, Keras 3). Errors name the layer (class and name)
// and what is wrong: an unsupported class or option, a shape that does not fit, a graph that
// is not one input to one output.
StatusOr<Graph> ParseKerasModel(std::string_view json_text);
// The same, from a file.
StatusOr<Graph> LoadKerasModel(const std::string& path);

// The graph's initial parameters (layout above) and state (moving means 0, variances 1, or as
// their initializers say), deterministic for `seed`.
std::vector<float> InitialParameters(const Graph& graph, uint64_t seed);
std::vector<float> InitialState(const Graph& graph);

}  // namespace tj::model
