#include "trainer/model/graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>

#include "common/random.h"

namespace tj::model {
namespace {

std::string Where(const Layer& layer) {
  return "layer " + layer.keras_class + " '" + layer.name + "'";
}

// Output size of a window along one axis, and the padding before it (TensorFlow's rules:
// "valid" takes whole windows only; "same" gives ceil(in / stride) outputs, padding split
// evenly with the odd one after).
bool WindowAxis(int in, int k, int s, Padding padding, int* out, int* pad_before) {
  if (padding == Padding::kValid) {
    if (in < k) return false;
    *out = (in - k) / s + 1;
    *pad_before = 0;
    return true;
  }
  *out = (in + s - 1) / s;
  const int total = std::max((*out - 1) * s + k - in, 0);
  *pad_before = total / 2;
  return true;
}

Status WindowShape(Layer* layer, int channels) {
  const Shape& in = layer->in;
  if (in.flat) {
    return Status::Error(Where(*layer) + ": needs an input of (height, width, channels), not " +
                         in.ToString());
  }
  Shape out{0, 0, channels, false};
  if (!WindowAxis(in.h, layer->kh, layer->sh, layer->padding, &out.h, &layer->pad_top) ||
      !WindowAxis(in.w, layer->kw, layer->sw, layer->padding, &out.w, &layer->pad_left)) {
    return Status::Error(Where(*layer) + ": its " + std::to_string(layer->kh) + "x" +
                         std::to_string(layer->kw) + " window does not fit its input " +
                         in.ToString() + " with padding \"valid\"");
  }
  layer->out = out;
  return Status::Ok();
}

// The layer's output shape from its inputs' (already known).
Status InferShape(const Graph& graph, Layer* layer) {
  const size_t arity = layer->inputs.size();
  if (layer->type == LayerType::kAdd ? arity < 2 : arity != 1) {
    return Status::Error(Where(*layer) + ": has " + std::to_string(arity) + " inputs, expected " +
                         (layer->type == LayerType::kAdd ? "two or more" : "one"));
  }
  layer->in = graph.layers[layer->inputs[0]].out;
  const Shape& in = layer->in;
  switch (layer->type) {
    case LayerType::kInput:
      break;
    case LayerType::kConv2D:
      if (in.c % layer->groups != 0 || layer->filters % layer->groups != 0) {
        return Status::Error(Where(*layer) + ": groups " + std::to_string(layer->groups) +
                             " must divide its input channels (" + std::to_string(in.c) +
                             ") and its filters (" + std::to_string(layer->filters) + ")");
      }
      return WindowShape(layer, layer->filters);
    case LayerType::kDepthwiseConv2D:
      return WindowShape(layer, in.c * layer->depth_multiplier);
    case LayerType::kMaxPool:
    case LayerType::kAvgPool:
      return WindowShape(layer, in.c);
    case LayerType::kGlobalAvgPool:
      if (in.flat) {
        return Status::Error(Where(*layer) + ": needs an input of (height, width, channels), not " +
                             in.ToString());
      }
      layer->out = {1, 1, in.c, !layer->keepdims};
      break;
    case LayerType::kFlatten:
      layer->out = {1, 1, static_cast<int>(in.size()), true};
      break;
    case LayerType::kDense:
      if (!in.flat) {
        return Status::Error(Where(*layer) + ": its input " + in.ToString() +
                             " is not a vector (Dense over the last axis of an image is not "
                             "supported: put a Flatten or a GlobalAveragePooling2D before it)");
      }
      layer->out = {1, 1, layer->filters, true};
      break;
    case LayerType::kAdd:
      for (int i : layer->inputs) {
        if (!(graph.layers[i].out == in)) {
          return Status::Error(Where(*layer) + ": its inputs have different shapes, " +
                               in.ToString() + " from '" + graph.layers[layer->inputs[0]].name +
                               "' and " + graph.layers[i].out.ToString() + " from '" +
                               graph.layers[i].name + "' (no broadcasting)");
        }
      }
      layer->out = in;
      break;
    case LayerType::kBatchNorm:
    case LayerType::kActivation:
    case LayerType::kDropout:
    case LayerType::kRescaling:
      layer->out = in;
      break;
    case LayerType::kZeroPadding:
      if (in.flat) {
        return Status::Error(Where(*layer) + ": needs an input of (height, width, channels), not " +
                             in.ToString());
      }
      layer->out = {in.h + layer->pad_top + layer->pad_bottom,
                    in.w + layer->pad_left + layer->pad_right, in.c, false};
      break;
  }
  return Status::Ok();
}

// The limit of a uniform initializer for these fans (Keras' VarianceScaling:
// sqrt(3 scale / max(1, fan))).
float UniformLimit(const Initializer& init, int fan_in, int fan_out) {
  if (init.glorot) return std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  const float fan = init.fan == Initializer::Fan::kIn    ? static_cast<float>(fan_in)
                    : init.fan == Initializer::Fan::kOut ? static_cast<float>(fan_out)
                                                         : 0.5f * (fan_in + fan_out);
  return std::sqrt(3.0f * init.scale / std::max(1.0f, fan));
}

Tensor MakeTensor(const Layer& layer, const char* name, std::vector<int> shape,
                  const Initializer& init, int fan_in = 1, int fan_out = 1) {
  Tensor t;
  t.name = layer.name + "/" + name;
  t.size = 1;
  for (int d : shape) t.size *= static_cast<size_t>(d);
  t.shape = std::move(shape);
  t.init = init.init;
  if (t.init == Init::kUniform) t.limit = UniformLimit(init, fan_in, fan_out);
  return t;
}

// The layer's tensors (without offsets), in Keras' order.
void MakeTensors(Layer* layer) {
  const int cin = layer->in.c;
  const int window = layer->kh * layer->kw;
  switch (layer->type) {
    case LayerType::kConv2D: {
      const int per_group = cin / layer->groups;
      layer->kernel = 0;
      layer->params.push_back(
          MakeTensor(*layer, "kernel", {layer->kh, layer->kw, per_group, layer->filters},
                     layer->kernel_init, window * per_group, window * layer->filters));
      break;
    }
    case LayerType::kDepthwiseConv2D:
      layer->kernel = 0;
      layer->params.push_back(
          MakeTensor(*layer, "kernel", {layer->kh, layer->kw, cin, layer->depth_multiplier},
                     layer->kernel_init, window * cin, window * layer->depth_multiplier));
      break;
    case LayerType::kDense:
      layer->kernel = 0;
      layer->params.push_back(MakeTensor(*layer, "kernel", {cin, layer->filters},
                                         layer->kernel_init, cin, layer->filters));
      layer->params.back().out_major = true;
      break;
    case LayerType::kBatchNorm:
      if (layer->scale) {
        layer->gamma = static_cast<int>(layer->params.size());
        layer->params.push_back(MakeTensor(*layer, "gamma", {cin}, layer->gamma_init));
      }
      if (layer->center) {
        layer->beta = static_cast<int>(layer->params.size());
        layer->params.push_back(MakeTensor(*layer, "beta", {cin}, layer->beta_init));
      }
      layer->state.push_back(MakeTensor(*layer, "moving_mean", {cin}, layer->moving_mean_init));
      layer->state.push_back(
          MakeTensor(*layer, "moving_variance", {cin}, layer->moving_variance_init));
      return;
    default:
      return;
  }
  if (layer->use_bias) {
    layer->bias = static_cast<int>(layer->params.size());
    layer->params.push_back(MakeTensor(*layer, "bias", {layer->out.c}, layer->bias_init));
  }
}

// Every layer leads to the output, the input is the only layer without inputs, and `order`
// runs the layers so that each comes after its inputs (the JSON's order where it allows).
Status Order(Graph* graph) {
  const int n = static_cast<int>(graph->layers.size());
  std::vector<char> needed(n, 0);
  std::vector<int> stack = {graph->output};
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    if (needed[i]) continue;
    needed[i] = 1;
    for (int j : graph->layers[i].inputs) stack.push_back(j);
  }
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> users(n);
  for (int i = 0; i < n; ++i) {
    const Layer& layer = graph->layers[i];
    if (!needed[i]) {
      return Status::Error(Where(layer) + ": does not lead to the model's output '" +
                           graph->layers[graph->output].name + "'");
    }
    if (layer.type == LayerType::kInput && i != graph->input) {
      return Status::Error(Where(layer) +
                           ": a second input; only models of one input are "
                           "supported");
    }
    if (layer.type != LayerType::kInput && layer.inputs.empty()) {
      return Status::Error(Where(layer) + ": has no inputs");
    }
    pending[i] = static_cast<int>(layer.inputs.size());
    for (int j : layer.inputs) users[j].push_back(i);
  }
  if (graph->layers[graph->input].type != LayerType::kInput) {
    return Status::Error(Where(graph->layers[graph->input]) +
                         ": the model's input is not an "
                         "InputLayer");
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  ready.push(graph->input);
  graph->order.clear();
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    graph->order.push_back(i);
    for (int u : users[i]) {
      if (--pending[u] == 0) ready.push(u);
    }
  }
  if (static_cast<int>(graph->order.size()) != n) {
    return Status::Error("the layers form a cycle or do not all come from the input");
  }
  return Status::Ok();
}

}  // namespace

std::string Shape::ToString() const {
  if (flat) return "(" + std::to_string(c) + ",)";
  return "(" + std::to_string(h) + ", " + std::to_string(w) + ", " + std::to_string(c) + ")";
}

Status FinishGraph(Graph* graph) {
  if (graph->layers.empty()) return Status::Error("the model has no layers");
  TJ_RETURN_IF_ERROR(Order(graph));
  for (int i : graph->order) {
    Layer& layer = graph->layers[i];
    if (layer.type == LayerType::kInput) continue;
    TJ_RETURN_IF_ERROR(InferShape(*graph, &layer));
    if (layer.activation == Activation::kSoftmax && i != graph->output) {
      return Status::Error(Where(layer) +
                           ": softmax is supported only on the output layer, where it is "
                           "folded into the softmax cross-entropy loss");
    }
  }
  const Layer& output = graph->layers[graph->output];
  if (!output.out.flat || output.out.c < 2) {
    return Status::Error(Where(output) + ": the model's output " + output.out.ToString() +
                         " is not a vector of two or more class logits (end the model with a "
                         "Dense layer of one unit per class)");
  }
  graph->output_softmax = output.activation == Activation::kSoftmax;
  graph->parameter_count = graph->state_count = 0;
  for (Layer& layer : graph->layers) {
    layer.params.clear();
    layer.state.clear();
    MakeTensors(&layer);
    for (Tensor& t : layer.params) {
      t.offset = graph->parameter_count;
      graph->parameter_count += t.size;
    }
    for (Tensor& t : layer.state) {
      t.offset = graph->state_count;
      graph->state_count += t.size;
    }
  }
  return Status::Ok();
}

std::vector<Graph::WeightRef> Graph::KerasWeights() const {
  std::vector<WeightRef> refs;
  for (const Layer& layer : layers) {
    for (const Tensor& t : layer.params) refs.push_back({0, &t});
    for (const Tensor& t : layer.state) refs.push_back({1, &t});
  }
  return refs;
}

std::string Graph::Summary() const {
  std::string text;
  char line[256];
  std::snprintf(line, sizeof line, "%-20s %-24s %-16s %10s  %s\n", "layer", "class", "output",
                "parameters", "inputs");
  text += line;
  for (int i : order) {
    const Layer& layer = layers[i];
    size_t count = 0;
    for (const Tensor& t : layer.params) count += t.size;
    std::string inputs;
    for (int j : layer.inputs) inputs += (inputs.empty() ? "" : ", ") + layers[j].name;
    std::snprintf(line, sizeof line, "%-20s %-24s %-16s %10zu  %s\n", layer.name.c_str(),
                  layer.keras_class.c_str(), layer.out.ToString().c_str(), count, inputs.c_str());
    text += line;
  }
  text += "parameters: " + std::to_string(parameter_count) +
          ", state (moving statistics): " + std::to_string(state_count) + "\n";
  return text;
}

std::vector<float> InitialParameters(const Graph& graph, uint64_t seed) {
  std::vector<float> p(graph.parameter_count, 0.0f);
  uint64_t stream = 1001;
  for (const Layer& layer : graph.layers) {
    for (const Tensor& t : layer.params) {
      float* w = p.data() + t.offset;
      if (t.init == Init::kOnes) std::fill(w, w + t.size, 1.0f);
      if (t.init != Init::kUniform) continue;
      SplitMix64 rng(DeriveSeed(seed, stream++));
      auto draw = [&] { return (2.0f * rng.NextFloat() - 1.0f) * t.limit; };
      if (t.out_major) {
        const size_t in = t.shape[0], out = t.shape[1];
        for (size_t o = 0; o < out; ++o)
          for (size_t i = 0; i < in; ++i) w[i * out + o] = draw();
      } else {
        for (size_t i = 0; i < t.size; ++i) w[i] = draw();
      }
    }
  }
  return p;
}

std::vector<float> InitialState(const Graph& graph) {
  std::vector<float> s(graph.state_count, 0.0f);
  for (const Layer& layer : graph.layers) {
    for (const Tensor& t : layer.state) {
      if (t.init == Init::kOnes) std::fill(s.data() + t.offset, s.data() + t.offset + t.size, 1.0f);
    }
  }
  return s;
}

}  // namespace tj::model
