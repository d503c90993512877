// Keras 3's model JSON (`model.to_json()`) into a Graph's layers: class, options and inputs.
// What the layers make together (order, shapes, tensors) is FinishGraph's (graph.cpp).
//
// The format, as Keras 3 writes it: {"class_name": "Sequential" | "Functional", "config":
// {"name", "layers": [...], and for Functional "input_layers" / "output_layers" ([name, 0, 0]
// or a list of those)}}; each layer {"class_name", "name", "config": {...}, and for Functional
// "inbound_nodes": [{"args": [...], "kwargs": {...}}]}, where each input tensor in args is
// {"class_name": "__keras_tensor__", "config": {"keras_history": [layer, node, tensor]}}.
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "trainer/model/graph.h"

namespace tj::model {
namespace {

using nlohmann::json;

std::string Brief(const json& value) {
  std::string text = value.dump();
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

// A layer's "config" object, read field by field; the first error is kept, prefixed with the
// layer ("layer Conv2D 'conv': ...").
class Config {
 public:
  Config(const json& config, std::string where) : config_(config), where_(std::move(where)) {}

  const std::string& where() const { return where_; }
  const Status& status() const { return status_; }
  void Fail(const std::string& message) {
    if (status_.ok()) status_ = Status::Error(where_ + ": " + message);
  }

  // The field, or null when absent or null.
  const json* Find(const char* key) const {
    auto it = config_.find(key);
    return it == config_.end() || it->is_null() ? nullptr : &*it;
  }

  int Int(const char* key, int fallback, int min) {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number_integer() || v->get<int64_t>() < min || v->get<int64_t>() > (1 << 24)) {
      Fail(std::string(key) + " must be an integer of at least " + std::to_string(min) + ", not " +
           Brief(*v));
      return fallback;
    }
    return v->get<int>();
  }

  double Number(const char* key, double fallback) {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>())) {
      Fail(std::string(key) + " must be a number, not " + Brief(*v));
      return fallback;
    }
    return v->get<double>();
  }

  bool Bool(const char* key, bool fallback) {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) {
      Fail(std::string(key) + " must be true or false, not " + Brief(*v));
      return fallback;
    }
    return v->get<bool>();
  }

  std::string String(const char* key, const std::string& fallback) {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) {
      Fail(std::string(key) + " must be a string, not " + Brief(*v));
      return fallback;
    }
    return v->get<std::string>();
  }

  // An integer n (n, n) or a list [a, b] of positive integers.
  std::pair<int, int> Pair(const char* key, std::pair<int, int> fallback) {
    const json* v = Find(key);
    if (v == nullptr) return fallback;
    auto positive = [](const json& x) {
      return x.is_number_integer() && x.get<int64_t>() >= 1 && x.get<int64_t>() <= (1 << 16);
    };
    if (positive(*v)) return {v->get<int>(), v->get<int>()};
    if (v->is_array() && v->size() == 2 && positive((*v)[0]) && positive((*v)[1])) {
      return {(*v)[0].get<int>(), (*v)[1].get<int>()};
    }
    Fail(std::string(key) + " must be a positive integer or a list of two, not " + Brief(*v));
    return fallback;
  }

  // Fails unless the field is absent or null (regularizers, constraints, options whose use
  // this engine does not implement).
  void ExpectNull(const char* key, const char* why) {
    if (const json* v = Find(key)) Fail(std::string(key) + " " + Brief(*v) + ": " + why);
  }

  void ExpectString(const char* key, const char* expected, const char* why) {
    const json* v = Find(key);
    if (v != nullptr && *v != expected) Fail(std::string(key) + " " + Brief(*v) + ": " + why);
  }

 private:
  const json& config_;
  std::string where_;
  Status status_;
};

// "linear", "relu", "relu6", "softmax"; Keras 3 writes built-in activations as their names (a
// function it serialises as {"class_name": "function", "config": "relu", ...}).
void ReadActivation(Config& c, Layer* layer) {
  const json* v = c.Find("activation");
  if (v == nullptr) return;
  std::string name;
  if (v->is_string()) {
    name = v->get<std::string>();
  } else if (v->is_object() && v->contains("config") && (*v)["config"].is_string()) {
    name = (*v)["config"].get<std::string>();
  } else {
    c.Fail("activation " + Brief(*v) + " is not supported (linear, relu, relu6, softmax)");
    return;
  }
  if (name == "linear") {
    layer->activation = Activation::kLinear;
  } else if (name == "relu") {
    layer->activation = Activation::kRelu;
  } else if (name == "relu6") {
    layer->activation = Activation::kRelu;
    layer->relu_max = 6.0f;
  } else if (name == "softmax") {
    layer->activation = Activation::kSoftmax;
  } else {
    c.Fail("activation '" + name +
           "' is not supported (linear, relu, relu6, and softmax on the output layer)");
  }
}

Initializer ReadInitializer(Config& c, const char* key, Initializer fallback) {
  const json* v = c.Find(key);
  if (v == nullptr) return fallback;
  std::string name;
  const json* config = nullptr;
  if (v->is_string()) {
    name = v->get<std::string>();
  } else if (v->is_object() && v->contains("class_name") && (*v)["class_name"].is_string()) {
    name = (*v)["class_name"].get<std::string>();
    if (v->contains("config") && (*v)["config"].is_object()) config = &(*v)["config"];
  }
  Initializer init;
  if (name == "Zeros" || name == "zeros") return init;
  init.init = Init::kOnes;
  if (name == "Ones" || name == "ones") return init;
  init.init = Init::kUniform;
  if (name == "GlorotUniform" || name == "glorot_uniform") {
    init.glorot = true;
    return init;
  }
  if (name == "HeUniform" || name == "he_uniform") {
    init.scale = 2.0f;
    init.fan = Initializer::Fan::kIn;
    return init;
  }
  if (name == "LecunUniform" || name == "lecun_uniform") {
    init.fan = Initializer::Fan::kIn;
    return init;
  }
  if (name == "VarianceScaling" && config != nullptr) {
    Config vs(*config, c.where() + ": " + key);
    init.scale = static_cast<float>(vs.Number("scale", 1.0));
    const std::string mode = vs.String("mode", "fan_in");
    const std::string distribution = vs.String("distribution", "truncated_normal");
    init.fan = mode == "fan_out"  ? Initializer::Fan::kOut
               : mode == "fan_in" ? Initializer::Fan::kIn
                                  : Initializer::Fan::kAvg;
    if (vs.status().ok() && distribution == "uniform" && init.scale > 0.0f &&
        (mode == "fan_in" || mode == "fan_out" || mode == "fan_avg")) {
      return init;
    }
  }
  c.Fail(std::string(key) + " " + Brief(*v) +
         " is not supported (Zeros, Ones, GlorotUniform, HeUniform, LecunUniform, "
         "VarianceScaling with distribution \"uniform\")");
  return fallback;
}

// Regularizers and constraints change what training does; none is implemented.
void ExpectNoRegularizers(Config& c, std::initializer_list<const char*> weights) {
  for (const char* w : weights) {
    for (const char* kind : {"_regularizer", "_constraint"}) {
      const std::string key = std::string(w) + kind;
      c.ExpectNull(key.c_str(), "regularizers and constraints are not supported");
    }
  }
  c.ExpectNull("activity_regularizer", "regularizers are not supported");
}

void ReadWindow(Config& c, Layer* layer, const char* size_key, bool strides_default_to_size) {
  const auto [kh, kw] = c.Pair(size_key, {1, 1});
  layer->kh = kh;
  layer->kw = kw;
  const auto [sh, sw] =
      c.Pair("strides", strides_default_to_size ? std::pair{kh, kw} : std::pair{1, 1});
  layer->sh = sh;
  layer->sw = sw;
  const std::string padding = c.String("padding", "valid");
  if (padding == "same") {
    layer->padding = Padding::kSame;
  } else if (padding != "valid") {
    c.Fail("padding '" + padding + "' is not supported (valid, same)");
  }
  c.ExpectString("data_format", "channels_last", "only channels_last (NHWC) is supported");
  if (c.Find("dilation_rate") != nullptr && c.Pair("dilation_rate", {1, 1}) != std::pair{1, 1}) {
    c.Fail("dilation_rate " + Brief(*c.Find("dilation_rate")) + " is not supported (only 1)");
  }
}

// The input shape of batch_shape [null, h, w, c] or [null, features].
void ReadInputShape(Config& c, const json& batch_shape, Layer* layer) {
  auto positive = [](const json& x) {
    return x.is_number_integer() && x.get<int64_t>() >= 1 && x.get<int64_t>() <= (1 << 24);
  };
  bool ok = batch_shape.is_array() && (batch_shape.size() == 4 || batch_shape.size() == 2);
  for (size_t i = 1; ok && i < batch_shape.size(); ++i) ok = positive(batch_shape[i]);
  if (!ok) {
    c.Fail("input shape " + Brief(batch_shape) +
           " is not supported: give (height, width, channels) or (features,), every "
           "dimension known");
    return;
  }
  if (batch_shape.size() == 4) {
    layer->out = {batch_shape[1].get<int>(), batch_shape[2].get<int>(), batch_shape[3].get<int>(),
                  false};
  } else {
    layer->out = {1, 1, batch_shape[1].get<int>(), true};
  }
}

void ReadInput(Config& c, Layer* layer) {
  const json* shape = c.Find("batch_shape");
  if (shape == nullptr) shape = c.Find("batch_input_shape");
  if (shape == nullptr) {
    c.Fail("has no batch_shape");
    return;
  }
  ReadInputShape(c, *shape, layer);
  if (c.Bool("sparse", false) || c.Bool("ragged", false)) {
    c.Fail("sparse and ragged inputs are not supported");
  }
  // The input is fed as float32 whatever its dtype says (uint8 pixels: what the data were).
}

Initializer Glorot() {
  Initializer init{Init::kUniform};
  init.glorot = true;
  return init;
}

void ReadConv(Config& c, Layer* layer, bool depthwise) {
  ReadWindow(c, layer, "kernel_size", false);
  if (depthwise) {
    layer->depth_multiplier = c.Int("depth_multiplier", 1, 1);
    layer->kernel_init = ReadInitializer(c, "depthwise_initializer", Glorot());
    ExpectNoRegularizers(c, {"depthwise", "bias"});
  } else {
    layer->filters = c.Int("filters", 0, 1);
    if (c.Find("filters") == nullptr) c.Fail("has no filters");
    layer->groups = c.Int("groups", 1, 1);
    layer->kernel_init = ReadInitializer(c, "kernel_initializer", Glorot());
    ExpectNoRegularizers(c, {"kernel", "bias"});
  }
  layer->use_bias = c.Bool("use_bias", true);
  layer->bias_init = ReadInitializer(c, "bias_initializer", {});
  ReadActivation(c, layer);
}

void ReadDense(Config& c, Layer* layer) {
  layer->filters = c.Int("units", 0, 1);
  if (c.Find("units") == nullptr) c.Fail("has no units");
  layer->use_bias = c.Bool("use_bias", true);
  layer->kernel_init = ReadInitializer(c, "kernel_initializer", Glorot());
  layer->bias_init = ReadInitializer(c, "bias_initializer", {});
  ExpectNoRegularizers(c, {"kernel", "bias"});
  if (c.Int("lora_rank", 0, 0) != 0) c.Fail("LoRA is not supported");
  c.ExpectNull("quantization_config", "quantized layers are not supported");
  ReadActivation(c, layer);
}

void ReadBatchNorm(Config& c, Layer* layer) {
  const json* axis = c.Find("axis");
  auto last = [](const json& a) {
    return a.is_number_integer() && (a.get<int64_t>() == -1 || a.get<int64_t>() == 3);
  };
  if (axis != nullptr && !last(*axis) &&
      !(axis->is_array() && axis->size() == 1 && last((*axis)[0]))) {
    c.Fail("axis " + Brief(*axis) + " is not supported (only the channels, -1)");
  }
  layer->epsilon = static_cast<float>(c.Number("epsilon", 1e-3));
  layer->momentum = c.Number("momentum", 0.99);
  if (!(layer->epsilon > 0.0f)) c.Fail("epsilon must be positive");
  layer->center = c.Bool("center", true);
  layer->scale = c.Bool("scale", true);
  if (c.Bool("renorm", false)) c.Fail("renorm is not supported");
  if (c.Bool("synchronized", false)) {
    c.Fail("synchronized (cross-replica) batch statistics are not supported");
  }
  layer->gamma_init = ReadInitializer(c, "gamma_initializer", {Init::kOnes});
  layer->beta_init = ReadInitializer(c, "beta_initializer", {});
  layer->moving_mean_init = ReadInitializer(c, "moving_mean_initializer", {});
  layer->moving_variance_init = ReadInitializer(c, "moving_variance_initializer", {Init::kOnes});
  if (layer->moving_mean_init.init == Init::kUniform ||
      layer->moving_variance_init.init == Init::kUniform) {
    c.Fail("moving statistics must start as Zeros or Ones");
  }
  ExpectNoRegularizers(c, {"beta", "gamma"});
}

void ReadRelu(Config& c, Layer* layer) {
  layer->activation = Activation::kRelu;
  if (c.Find("max_value") != nullptr) {
    layer->relu_max = static_cast<float>(c.Number("max_value", 0.0));
    if (!(layer->relu_max > 0.0f)) c.Fail("max_value must be positive");
  }
  if (c.Number("negative_slope", 0.0) != 0.0) c.Fail("negative_slope is not supported (only 0)");
  if (c.Number("threshold", 0.0) != 0.0) c.Fail("threshold is not supported (only 0)");
}

void ReadRescaling(Config& c, Layer* layer) {
  for (const char* key : {"scale", "offset"}) {
    const json* v = c.Find(key);
    if (v != nullptr && !v->is_number()) {
      c.Fail(std::string(key) + " " + Brief(*v) + " is not supported (only one number)");
    }
  }
  layer->rescale = static_cast<float>(c.Number("scale", 1.0));
  layer->offset = static_cast<float>(c.Number("offset", 0.0));
}

// ZeroPadding2D's padding: n (n rows and columns on every side), [h, w] (h rows above and
// below, w columns left and right) or [[top, bottom], [left, right]], as Keras accepts it.
void ReadZeroPadding(Config& c, Layer* layer) {
  c.ExpectString("data_format", "channels_last", "only channels_last (NHWC) is supported");
  const json* v = c.Find("padding");
  auto amount = [](const json& x) {
    return x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() <= (1 << 16);
  };
  auto both = [&](const json& x) {
    return x.is_array() && x.size() == 2 && amount(x[0]) && amount(x[1]);
  };
  if (v == nullptr) {
    layer->pad_top = layer->pad_bottom = layer->pad_left = layer->pad_right = 1;
  } else if (amount(*v)) {
    layer->pad_top = layer->pad_bottom = layer->pad_left = layer->pad_right = v->get<int>();
  } else if (both(*v)) {
    layer->pad_top = layer->pad_bottom = (*v)[0].get<int>();
    layer->pad_left = layer->pad_right = (*v)[1].get<int>();
  } else if (v->is_array() && v->size() == 2 && both((*v)[0]) && both((*v)[1])) {
    layer->pad_top = (*v)[0][0].get<int>();
    layer->pad_bottom = (*v)[0][1].get<int>();
    layer->pad_left = (*v)[1][0].get<int>();
    layer->pad_right = (*v)[1][1].get<int>();
  } else {
    c.Fail("padding " + Brief(*v) +
           " is not supported (an integer n, [rows, columns] or [[top, bottom], [left, right]], "
           "none negative)");
  }
}

const std::map<std::string, LayerType, std::less<>>& LayerTypes() {
  static const auto* types = new std::map<std::string, LayerType, std::less<>>{
      {"InputLayer", LayerType::kInput},
      {"Conv2D", LayerType::kConv2D},
      {"DepthwiseConv2D", LayerType::kDepthwiseConv2D},
      {"BatchNormalization", LayerType::kBatchNorm},
      {"Activation", LayerType::kActivation},
      {"ReLU", LayerType::kActivation},
      {"MaxPooling2D", LayerType::kMaxPool},
      {"AveragePooling2D", LayerType::kAvgPool},
      {"GlobalAveragePooling2D", LayerType::kGlobalAvgPool},
      {"Flatten", LayerType::kFlatten},
      {"Dense", LayerType::kDense},
      {"Dropout", LayerType::kDropout},
      {"Add", LayerType::kAdd},
      {"Rescaling", LayerType::kRescaling},
      {"ZeroPadding2D", LayerType::kZeroPadding},
  };
  return *types;
}

// The options every layer has: trainable and the dtype policy.
void ReadCommon(Config& c, Layer* layer) {
  layer->trainable = c.Bool("trainable", true);
  const json* dtype = c.Find("dtype");
  if (dtype == nullptr) return;
  std::string policy;
  if (dtype->is_string()) {
    policy = dtype->get<std::string>();
  } else if (dtype->is_object() && dtype->contains("config") && (*dtype)["config"].is_object()) {
    const json& config = (*dtype)["config"];
    if (config.contains("name") && config["name"].is_string()) {
      policy = config["name"].get<std::string>();
    }
  }
  if (policy != "float32" && policy != "uint8" && policy != "int32") {
    c.Fail("dtype " + Brief(*dtype) + " is not supported (float32 only)");
  }
}

// One layer's class and options (not its inputs).
Status ReadLayer(const json& entry, Layer* layer) {
  if (!entry.is_object() || !entry.contains("class_name") || !entry["class_name"].is_string() ||
      !entry.contains("config") || !entry["config"].is_object()) {
    return Status::Error("a layer entry without class_name and config: " + Brief(entry));
  }
  const json& config = entry["config"];
  layer->keras_class = entry["class_name"].get<std::string>();
  if (config.contains("name") && config["name"].is_string()) {
    layer->name = config["name"].get<std::string>();
  } else if (entry.contains("name") && entry["name"].is_string()) {
    layer->name = entry["name"].get<std::string>();
  }
  const std::string where = "layer " + layer->keras_class + " '" + layer->name + "'";
  auto type = LayerTypes().find(layer->keras_class);
  if (type == LayerTypes().end()) {
    return Status::Error(where + ": not supported; the supported layers are " + SupportedLayers());
  }
  layer->type = type->second;
  Config c(config, where);
  if (layer->type != LayerType::kInput) ReadCommon(c, layer);
  switch (layer->type) {
    case LayerType::kInput:
      ReadInput(c, layer);
      break;
    case LayerType::kConv2D:
      ReadConv(c, layer, /*depthwise=*/false);
      break;
    case LayerType::kDepthwiseConv2D:
      ReadConv(c, layer, /*depthwise=*/true);
      break;
    case LayerType::kBatchNorm:
      ReadBatchNorm(c, layer);
      break;
    case LayerType::kActivation:
      if (layer->keras_class == "ReLU") {
        ReadRelu(c, layer);
      } else {
        ReadActivation(c, layer);
      }
      break;
    case LayerType::kMaxPool:
    case LayerType::kAvgPool:
      ReadWindow(c, layer, "pool_size", true);
      break;
    case LayerType::kGlobalAvgPool:
      c.ExpectString("data_format", "channels_last", "only channels_last (NHWC) is supported");
      layer->keepdims = c.Bool("keepdims", false);
      break;
    case LayerType::kFlatten:
      c.ExpectString("data_format", "channels_last", "only channels_last (NHWC) is supported");
      break;
    case LayerType::kDense:
      ReadDense(c, layer);
      break;
    case LayerType::kDropout:
      layer->rate = static_cast<float>(c.Number("rate", 0.0));
      if (!(layer->rate >= 0.0f && layer->rate < 1.0f)) c.Fail("rate must be in [0, 1)");
      c.ExpectNull("noise_shape", "noise_shape is not supported");
      break;
    case LayerType::kAdd:
      break;
    case LayerType::kRescaling:
      ReadRescaling(c, layer);
      break;
    case LayerType::kZeroPadding:
      ReadZeroPadding(c, layer);
      break;
  }
  return c.status();
}

// [name, node, tensor] or a list holding one such: the layer's name.
StatusOr<std::string> EndpointName(const json& v, const char* what) {
  const json* endpoint = &v;
  if (v.is_array() && v.size() == 1 && v[0].is_array()) endpoint = &v[0];
  if (endpoint->is_array() && endpoint->size() == 3 && (*endpoint)[0].is_string()) {
    return (*endpoint)[0].get<std::string>();
  }
  return Status::Error(std::string("the model's ") + what + " " + Brief(v) +
                       " is not one layer: only models of one input and one output are "
                       "supported");
}

// Every __keras_tensor__ in a node's args, in order: the names of the layers they come from.
Status CollectInputs(const json& v, const std::string& where, std::vector<std::string>* names) {
  if (v.is_array()) {
    for (const json& x : v) TJ_RETURN_IF_ERROR(CollectInputs(x, where, names));
    return Status::Ok();
  }
  if (!v.is_object() || !v.contains("class_name") || v["class_name"] != "__keras_tensor__") {
    return Status::Ok();  // a constant argument
  }
  const json* history = nullptr;
  if (v.contains("config") && v["config"].is_object() && v["config"].contains("keras_history")) {
    history = &v["config"]["keras_history"];
  }
  if (history == nullptr || !history->is_array() || history->size() != 3 ||
      !(*history)[0].is_string()) {
    return Status::Error(where + ": an input tensor without keras_history: " + Brief(v));
  }
  if ((*history)[1] != 0) {
    return Status::Error(where + ": takes the output of layer '" +
                         (*history)[0].get<std::string>() +
                         "' at a second call: shared layers are not supported");
  }
  if ((*history)[2] != 0) {
    return Status::Error(where + ": takes output " + Brief((*history)[2]) + " of layer '" +
                         (*history)[0].get<std::string>() +
                         "': layers of several outputs are not supported");
  }
  names->push_back((*history)[0].get<std::string>());
  return Status::Ok();
}

// The names of a Functional layer's inputs, from its one inbound node.
Status InboundNames(const json& entry, const std::string& where, std::vector<std::string>* names) {
  if (!entry.contains("inbound_nodes") || !entry["inbound_nodes"].is_array()) {
    return Status::Error(where + ": has no inbound_nodes");
  }
  const json& nodes = entry["inbound_nodes"];
  if (nodes.empty()) return Status::Ok();
  if (nodes.size() > 1) {
    return Status::Error(where + ": is called " + std::to_string(nodes.size()) +
                         " times: shared layers are not supported");
  }
  const json& node = nodes[0];
  if (node.is_array()) {
    return Status::Error(where +
                         ": inbound_nodes in the Keras 2 (tf-keras) format; write the "
                         "model with Keras 3 (`model.to_json()`)");
  }
  if (!node.is_object() || !node.contains("args")) {
    return Status::Error(where + ": an inbound node without args: " + Brief(node));
  }
  // Keras records the keyword arguments of the symbolic call: mask (null) and, for layers
  // with a training argument, its default, which the model's own training flag overrides
  // whenever it is given (fit, evaluate). Anything else is refused.
  if (node.contains("kwargs") && node["kwargs"].is_object()) {
    for (const auto& [key, value] : node["kwargs"].items()) {
      if (value.is_null() || (key == "training" && value.is_boolean())) continue;
      return Status::Error(where + ": called with the keyword argument " + key + "=" +
                           Brief(value) + ": not supported");
    }
  }
  return CollectInputs(node["args"], where, names);
}

Status ReadSequential(const json& config, Graph* graph) {
  const json& layers = config["layers"];
  for (const json& entry : layers) {
    Layer layer;
    TJ_RETURN_IF_ERROR(ReadLayer(entry, &layer));
    graph->layers.push_back(std::move(layer));
  }
  if (graph->layers.empty() || graph->layers[0].type != LayerType::kInput) {
    // No InputLayer: the built model's input shape, if it has one.
    const json* shape = nullptr;
    if (config.contains("build_input_shape") && !config["build_input_shape"].is_null()) {
      shape = &config["build_input_shape"];
    }
    if (shape == nullptr) {
      return Status::Error(
          "the Sequential model has no input shape: start it with keras.Input(shape=...) (or "
          "build it) before to_json()");
    }
    Layer input;
    input.keras_class = "InputLayer";
    input.name = "input";
    Config c(json::object(), "the Sequential model's build_input_shape");
    ReadInputShape(c, *shape, &input);
    TJ_RETURN_IF_ERROR(c.status());
    graph->layers.insert(graph->layers.begin(), std::move(input));
  }
  for (size_t i = 1; i < graph->layers.size(); ++i) {
    if (graph->layers[i].type == LayerType::kInput) {
      return Status::Error("layer InputLayer '" + graph->layers[i].name +
                           "': a second input; only models of one input are supported");
    }
    graph->layers[i].inputs = {static_cast<int>(i) - 1};
  }
  graph->input = 0;
  graph->output = static_cast<int>(graph->layers.size()) - 1;
  return Status::Ok();
}

Status ReadFunctional(const json& config, Graph* graph) {
  const json& layers = config["layers"];
  std::map<std::string, int, std::less<>> index;
  std::vector<std::vector<std::string>> inputs;
  for (const json& entry : layers) {
    Layer layer;
    TJ_RETURN_IF_ERROR(ReadLayer(entry, &layer));
    const std::string where = "layer " + layer.keras_class + " '" + layer.name + "'";
    if (!index.emplace(layer.name, static_cast<int>(graph->layers.size())).second) {
      return Status::Error(where + ": a second layer of that name");
    }
    inputs.emplace_back();
    TJ_RETURN_IF_ERROR(InboundNames(entry, where, &inputs.back()));
    graph->layers.push_back(std::move(layer));
  }
  for (size_t i = 0; i < graph->layers.size(); ++i) {
    for (const std::string& name : inputs[i]) {
      auto it = index.find(name);
      if (it == index.end()) {
        return Status::Error("layer " + graph->layers[i].keras_class + " '" +
                             graph->layers[i].name + "': its input '" + name +
                             "' is not a layer of the model");
      }
      graph->layers[i].inputs.push_back(it->second);
    }
  }
  for (const auto& [key, what, target] : {std::tuple{"input_layers", "input", &graph->input},
                                          std::tuple{"output_layers", "output", &graph->output}}) {
    if (!config.contains(key)) return Status::Error(std::string("the model has no ") + key);
    StatusOr<std::string> name = EndpointName(config[key], what);
    if (!name.ok()) return name.status();
    auto it = index.find(*name);
    if (it == index.end()) {
      return Status::Error(std::string("the model's ") + what + " '" + *name +
                           "' is not one of its layers");
    }
    *target = it->second;
  }
  return Status::Ok();
}

}  // namespace

std::string SupportedLayers() {
  std::string names;
  for (const auto& [name, type] : LayerTypes()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

StatusOr<Graph> ParseKerasModel(std::string_view json_text) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Status::Error("not JSON");
  if (!root.is_object() || !root.contains("class_name") || !root["class_name"].is_string() ||
      !root.contains("config") || !root["config"].is_object()) {
    return Status::Error("not a Keras model (no class_name and config at the top)");
  }
  const std::string kind = root["class_name"].get<std::string>();
  const json& config = root["config"];
  Graph graph;
  if (config.contains("name") && config["name"].is_string()) {
    graph.name = config["name"].get<std::string>();
  }
  if (kind != "Sequential" && kind != "Functional" && kind != "Model") {
    return Status::Error("a model of class " + kind +
                         ": only Sequential and Functional models are supported (a subclassed "
                         "model's layers are not in its JSON)");
  }
  if (!config.contains("layers") || !config["layers"].is_array()) {
    return Status::Error("the model has no layers list");
  }
  TJ_RETURN_IF_ERROR(kind == "Sequential" ? ReadSequential(config, &graph)
                                          : ReadFunctional(config, &graph));
  TJ_RETURN_IF_ERROR(FinishGraph(&graph));
  return graph;
}

StatusOr<Graph> LoadKerasModel(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error("reading the model " + path + ": cannot open it");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::Error("reading the model " + path + ": read error");
  StatusOr<Graph> graph = ParseKerasModel(text.str());
  if (!graph.ok()) return graph.status().WithContext("the model " + path);
  return graph;
}

}  // namespace tj::model
