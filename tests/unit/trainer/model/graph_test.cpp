// The Keras JSON parser and the graph: the example models' layers, shapes, parameter layout
// and initial values, and every refusal naming the layer and what is wrong.
#include "trainer/model/graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/unit/trainer/model/model_json.h"
#include "trainer/nn/model.h"

namespace tj::model {
namespace {

using testing::ExampleModel;
using testing::ExampleModelPath;
using testing::Functional;
using testing::Input;
using testing::json;
using testing::Node;
using testing::Sequential;

const Layer& Named(const Graph& g, const std::string& name) {
  for (const Layer& l : g.layers) {
    if (l.name == name) return l;
  }
  ADD_FAILURE() << "no layer " << name;
  return g.layers[0];
}

TEST(KerasModelTest, TheSeedsCnn) {
  StatusOr<Graph> g = LoadKerasModel(ExampleModelPath("seeds_cnn"));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->layers.size(), 6u);  // the InputLayer and five
  EXPECT_EQ(g->parameter_count, nn::Layout::kCount);
  EXPECT_EQ(g->state_count, 0u);
  EXPECT_EQ(g->input_shape(), (Shape{28, 28, 1, false}));
  EXPECT_EQ(g->classes(), 10);
  EXPECT_EQ(Named(*g, "pool").out, (Shape{13, 13, 32, false}));
  EXPECT_EQ(Named(*g, "flatten").out, (Shape{1, 1, 5408, true}));
  const Layer& conv = Named(*g, "conv");
  EXPECT_EQ(conv.params[conv.kernel].shape, (std::vector<int>{3, 3, 1, 32}));
  EXPECT_EQ(conv.params[conv.kernel].offset, nn::Layout::kConvKernel);
  EXPECT_EQ(conv.params[conv.bias].offset, nn::Layout::kConvBias);
  const Layer& dense1 = Named(*g, "dense1");
  EXPECT_EQ(dense1.params[dense1.kernel].shape, (std::vector<int>{5408, 64}));
  EXPECT_EQ(dense1.params[dense1.kernel].offset, nn::Layout::kDense1Kernel);
  EXPECT_EQ(dense1.activation, Activation::kRelu);
  EXPECT_EQ(Named(*g, "dense2").params[1].offset, nn::Layout::kDense2Bias);
  EXPECT_NE(g->Summary().find("dense1"), std::string::npos) << g->Summary();
}

// Keras' count_params() (written by make_models.py) is parameters + moving statistics.
TEST(KerasModelTest, TheResNetAndMobileNetBlocks) {
  StatusOr<Graph> resnet = LoadKerasModel(ExampleModelPath("resnet_block"));
  ASSERT_TRUE(resnet.ok()) << resnet.status().message();
  EXPECT_EQ(resnet->parameter_count + resnet->state_count, 19994u);
  EXPECT_EQ(resnet->state_count, 2u * (3 * 16 + 3 * 32));
  EXPECT_EQ(Named(*resnet, "b2_add").out, (Shape{14, 14, 32, false}));
  EXPECT_EQ(Named(*resnet, "b2_add").inputs.size(), 2u);
  EXPECT_EQ(Named(*resnet, "b2_conv1").pad_top, 0);  // 28 -> 14, stride 2, 3x3: pads 0 + 1
  EXPECT_EQ(Named(*resnet, "gap").out, (Shape{1, 1, 32, true}));
  EXPECT_EQ(resnet->layers[resnet->order.back()].name, "logits");

  StatusOr<Graph> mobile = LoadKerasModel(ExampleModelPath("mobilenet_v2_block"));
  ASSERT_TRUE(mobile.ok()) << mobile.status().message();
  EXPECT_EQ(mobile->parameter_count + mobile->state_count, 10474u);
  const Layer& dw = Named(*mobile, "depthwise");
  EXPECT_EQ(dw.type, LayerType::kDepthwiseConv2D);
  EXPECT_EQ(dw.out, (Shape{14, 14, 48, false}));
  EXPECT_EQ(dw.params[dw.kernel].shape, (std::vector<int>{3, 3, 48, 1}));
  EXPECT_EQ(Named(*mobile, "stem_relu6").relu_max, 6.0f);
  EXPECT_EQ(Named(*mobile, "depthwise_relu6").relu_max, 6.0f);
  EXPECT_FLOAT_EQ(Named(*mobile, "rescale").rescale, 2.0f / 255);
  EXPECT_EQ(Named(*mobile, "rescale").offset, -1.0f);
}

// The whole models: Keras' MobileNetV2 application (alpha 0.35, 32x32x3, 10 classes) and the
// CIFAR ResNet-20; count_params() as make_models.py printed it.
TEST(KerasModelTest, TheFullMobileNetV2AndResNet20) {
  StatusOr<Graph> mobile = LoadKerasModel(ExampleModelPath("mobilenet_v2"));
  ASSERT_TRUE(mobile.ok()) << mobile.status().message();
  EXPECT_EQ(mobile->parameter_count + mobile->state_count, 423018u);
  EXPECT_EQ(mobile->layers.size(), 156u);
  EXPECT_EQ(mobile->input_shape(), (Shape{32, 32, 3, false}));
  EXPECT_TRUE(mobile->output_softmax);
  // block_1_pad pads one row below and one column right before a valid, strided depthwise
  // convolution: 16x16 -> 17x17 -> 8x8.
  const Layer& pad = Named(*mobile, "block_1_pad");
  EXPECT_EQ(pad.type, LayerType::kZeroPadding);
  EXPECT_EQ(pad.in, (Shape{16, 16, 48, false}));
  EXPECT_EQ(pad.out, (Shape{17, 17, 48, false}));
  EXPECT_EQ(pad.pad_top + pad.pad_left, 0);
  EXPECT_EQ(pad.pad_bottom + pad.pad_right, 2);
  EXPECT_EQ(Named(*mobile, "block_1_depthwise").out, (Shape{8, 8, 48, false}));
  EXPECT_EQ(Named(*mobile, "out_relu").out, (Shape{1, 1, 1280, false}));

  StatusOr<Graph> resnet = LoadKerasModel(ExampleModelPath("resnet20"));
  ASSERT_TRUE(resnet.ok()) << resnet.status().message();
  EXPECT_EQ(resnet->parameter_count + resnet->state_count, 274042u);
  int convs = 0;
  for (const Layer& l : resnet->layers) convs += l.type == LayerType::kConv2D;
  EXPECT_EQ(convs, 21);  // 19 of the 20 weighted layers, the 2 projections
  EXPECT_EQ(Named(*resnet, "s3b1_add").out, (Shape{8, 8, 64, false}));
  EXPECT_EQ(Named(*resnet, "gap").out, (Shape{1, 1, 64, true}));
}

// ZeroPadding2D's padding in each of Keras' forms.
TEST(KerasModelTest, ZeroPaddingForms) {
  struct Form {
    json padding;
    int top, bottom, left, right;
  };
  const std::vector<Form> forms = {
      {2, 2, 2, 2, 2}, {{1, 3}, 1, 1, 3, 3}, {{{0, 1}, {2, 0}}, 0, 1, 2, 0}, {nullptr, 1, 1, 1, 1}};
  for (const Form& f : forms) {
    json config = {{"name", "pad"}};
    if (!f.padding.is_null()) config["padding"] = f.padding;
    StatusOr<Graph> g = ParseKerasModel(
        Sequential({Input(5, 4, 2), testing::KerasLayer("ZeroPadding2D", config),
                    testing::KerasLayer("Flatten", {{"name", "flatten"}}),
                    testing::KerasLayer("Dense", {{"name", "dense"}, {"units", 3}})})
            .dump());
    ASSERT_TRUE(g.ok()) << g.status().message();
    const Layer& pad = Named(*g, "pad");
    EXPECT_EQ(pad.pad_top, f.top) << f.padding.dump();
    EXPECT_EQ(pad.pad_bottom, f.bottom) << f.padding.dump();
    EXPECT_EQ(pad.pad_left, f.left) << f.padding.dump();
    EXPECT_EQ(pad.pad_right, f.right) << f.padding.dump();
    EXPECT_EQ(pad.out, (Shape{5 + f.top + f.bottom, 4 + f.left + f.right, 2, false}));
  }
}

// model.get_weights() order: layer by layer, parameters then moving statistics.
TEST(KerasModelTest, KerasWeightOrder) {
  StatusOr<Graph> g = LoadKerasModel(ExampleModelPath("resnet_block"));
  ASSERT_TRUE(g.ok());
  std::vector<std::string> names;
  for (const Graph::WeightRef& w : g->KerasWeights()) names.push_back(w.tensor->name);
  ASSERT_GE(names.size(), 6u);
  EXPECT_EQ(names[0], "stem_conv/kernel");
  EXPECT_EQ(names[1], "stem_bn/gamma");
  EXPECT_EQ(names[2], "stem_bn/beta");
  EXPECT_EQ(names[3], "stem_bn/moving_mean");
  EXPECT_EQ(names[4], "stem_bn/moving_variance");
  EXPECT_EQ(names[5], "b1_conv1/kernel");
  EXPECT_EQ(names.back(), "logits/bias");
  // b2_proj comes before b2_conv2 in Keras' layer order, so in the layout too.
  auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n); };
  EXPECT_LT(at("b2_proj/kernel"), at("b2_conv2/kernel"));
}

TEST(KerasModelTest, InitialParametersAreTheBuiltInModelsForTheSameSeed) {
  StatusOr<Graph> g = LoadKerasModel(ExampleModelPath("seeds_cnn"));
  ASSERT_TRUE(g.ok());
  for (uint64_t seed : {1u, 42u}) {
    const std::vector<float> keras = InitialParameters(*g, seed);
    const std::vector<float> builtin = nn::InitialParameters(seed);
    using L = nn::Layout;
    // Conv kernel and every bias: the same layout; dense kernels: transposed.
    for (size_t i = 0; i < L::kDense1Kernel; ++i) ASSERT_EQ(keras[i], builtin[i]) << i;
    for (size_t o = 0; o < 64; ++o) {
      for (size_t i = 0; i < nn::kFlat; ++i) {
        ASSERT_EQ(keras[L::kDense1Kernel + i * 64 + o], builtin[L::kDense1Kernel + o * 5408 + i]);
      }
    }
    for (size_t o = 0; o < 10; ++o) {
      for (size_t i = 0; i < 64; ++i) {
        ASSERT_EQ(keras[L::kDense2Kernel + i * 10 + o], builtin[L::kDense2Kernel + o * 64 + i]);
      }
    }
    for (size_t i = L::kDense1Bias; i < L::kDense2Kernel; ++i) ASSERT_EQ(keras[i], 0.0f);
  }
}

TEST(KerasModelTest, InitialValuesFollowKerasInitializers) {
  StatusOr<Graph> g = LoadKerasModel(ExampleModelPath("mobilenet_v2_block"));
  ASSERT_TRUE(g.ok());
  const std::vector<float> p = InitialParameters(*g, 7);
  EXPECT_EQ(p, InitialParameters(*g, 7));
  EXPECT_NE(p, InitialParameters(*g, 8));
  const std::vector<float> s = InitialState(*g);
  for (const Layer& l : g->layers) {
    for (const Tensor& t : l.params) {
      const float* w = p.data() + t.offset;
      if (t.name.ends_with("/gamma")) {
        for (size_t i = 0; i < t.size; ++i) EXPECT_EQ(w[i], 1.0f) << t.name;
      } else if (t.name.ends_with("/beta") || t.name.ends_with("/bias")) {
        for (size_t i = 0; i < t.size; ++i) EXPECT_EQ(w[i], 0.0f) << t.name;
      } else {
        // Glorot: limit sqrt(6 / (fan_in + fan_out)), Keras' fans.
        int receptive = 1;
        for (size_t d = 0; d + 2 < t.shape.size(); ++d) receptive *= t.shape[d];
        const int fan_in = receptive * t.shape[t.shape.size() - 2];
        const int fan_out = receptive * t.shape.back();
        const float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
        EXPECT_EQ(t.limit, limit) << t.name;
        float largest = 0.0f;
        for (size_t i = 0; i < t.size; ++i) largest = std::max(largest, std::abs(w[i]));
        EXPECT_LE(largest, limit) << t.name;
        EXPECT_GT(largest, 0.8f * limit) << t.name;
      }
    }
    if (l.type == LayerType::kBatchNorm) {
      for (int c = 0; c < l.out.c; ++c) {
        EXPECT_EQ(s[l.state[0].offset + c], 0.0f);
        EXPECT_EQ(s[l.state[1].offset + c], 1.0f);
      }
    }
  }
}

// A small model to break in the refusal tests: conv, flatten, dense.
json SmallCnn() {
  return Sequential(
      {Input(8, 8, 2),
       testing::KerasLayer("Conv2D", {{"name", "conv"}, {"filters", 4}, {"kernel_size", {3, 3}}}),
       testing::KerasLayer("Flatten", {{"name", "flatten"}}),
       testing::KerasLayer("Dense", {{"name", "dense"}, {"units", 3}})});
}

json Residual() {
  return Functional(
      {Node("InputLayer", {{"name", "x"}, {"batch_shape", {nullptr, 6, 6, 4}}}, {}),
       Node("Conv2D", {{"name", "c"}, {"filters", 4}, {"kernel_size", 3}, {"padding", "same"}},
            {"x"}),
       Node("Add", {{"name", "add"}}, {"x", "c"}),
       Node("GlobalAveragePooling2D", {{"name", "gap"}}, {"add"}),
       Node("Dense", {{"name", "out"}, {"units", 3}}, {"gap"})},
      "x", "out");
}

struct Refusal {
  const char* what;
  std::function<json()> model;
  std::vector<const char*> message;  // substrings the error must hold
};

TEST(KerasModelTest, RefusalsNameTheLayerAndTheProblem) {
  const std::vector<Refusal> refusals = {
      {"unsupported class",
       [] {
         json m = SmallCnn();
         m["config"]["layers"][1]["class_name"] = "LSTM";
         return m;
       },
       {"layer LSTM 'conv': not supported; the supported layers are", "Conv2D", "Rescaling"}},
      {"dilation",
       [] {
         json m = SmallCnn();
         m["config"]["layers"][1]["config"]["dilation_rate"] = {2, 2};
         return m;
       },
       {"layer Conv2D 'conv'", "dilation_rate"}},
      {"channels_first",
       [] {
         json m = SmallCnn();
         m["config"]["layers"][1]["config"]["data_format"] = "channels_first";
         return m;
       },
       {"layer Conv2D 'conv'", "channels_last"}},
      {"activation",
       [] {
         json m = SmallCnn();
         m["config"]["layers"][1]["config"]["activation"] = "tanh";
         return m;
       },
       {"layer Conv2D 'conv'", "activation 'tanh' is not supported"}},
      {"softmax inside",
       [] {
         json m = SmallCnn();
         m["config"]["layers"][1]["config"]["activation"] = "softmax";
         return m;
       },
       {"layer Conv2D 'conv'", "softmax is supported only on the output layer"}},
      {"dense on an image",
       [] {
         json m = SmallCnn();
         m["config"]["layers"].erase(2);
         return m;
       },
       {"layer Dense 'dense'", "(6, 6, 4) is not a vector", "Flatten"}},
      {"window too large",
       [] {
         json m = SmallCnn();
         m["config"]["layers"][1]["config"]["kernel_size"] = {9, 9};
         return m;
       },
       {"layer Conv2D 'conv'", "9x9 window does not fit its input (8, 8, 2)"}},
      {"output not a vector",
       [] {
         json m = SmallCnn();
         m["config"]["layers"].erase(3);
         m["config"]["layers"].erase(2);
         return m;
       },
       {"layer Conv2D 'conv'", "output (6, 6, 4) is not a vector"}},
      {"regularizer",
       [] {
         json m = SmallCnn();
         m["config"]["layers"][3]["config"]["kernel_regularizer"] = {{"class_name", "L2"}};
         return m;
       },
       {"layer Dense 'dense'", "kernel_regularizer", "not supported"}},
      {"initializer",
       [] {
         json m = SmallCnn();
         m["config"]["layers"][3]["config"]["kernel_initializer"] = {{"class_name", "HeNormal"}};
         return m;
       },
       {"layer Dense 'dense'", "kernel_initializer", "HeNormal", "GlorotUniform"}},
      {"groups",
       [] {
         json m = SmallCnn();
         m["config"]["layers"][1]["config"]["groups"] = 3;
         return m;
       },
       {"layer Conv2D 'conv'", "groups 3 must divide its input channels (2)"}},
      {"no input shape",
       [] {
         json m = SmallCnn();
         m["config"]["layers"].erase(0);
         return m;
       },
       {"no input shape", "keras.Input"}},
      {"add of different shapes",
       [] {
         json m = Residual();
         m["config"]["layers"][1]["config"]["padding"] = "valid";
         return m;
       },
       {"layer Add 'add'", "different shapes", "(6, 6, 4)", "(4, 4, 4)"}},
      {"shared layer",
       [] {
         json m = Residual();
         json& nodes = m["config"]["layers"][1]["inbound_nodes"];
         nodes.push_back(nodes[0]);
         return m;
       },
       {"layer Conv2D 'c'", "called 2 times", "shared layers"}},
      {"keras 2 format",
       [] {
         json m = Residual();
         m["config"]["layers"][1]["inbound_nodes"] = json::parse(R"([[["x", 0, 0, {}]]])");
         return m;
       },
       {"layer Conv2D 'c'", "Keras 2"}},
      {"keyword argument",
       [] {
         json m = Residual();
         m["config"]["layers"][1]["inbound_nodes"][0]["kwargs"] = {{"scale", 2}};
         return m;
       },
       {"layer Conv2D 'c'", "keyword argument scale=2"}},
      {"two inputs",
       [] {
         json m = Residual();
         m["config"]["input_layers"] = json::parse(R"([["x", 0, 0], ["y", 0, 0]])");
         return m;
       },
       {"one input and one output"}},
      {"unknown input",
       [] {
         json m = Residual();
         m["config"]["layers"][2]["inbound_nodes"][0]["args"][0][1]["config"]["keras_history"][0] =
             "nowhere";
         return m;
       },
       {"layer Add 'add'", "'nowhere' is not a layer of the model"}},
      {"dangling layer",
       [] {
         json m = Residual();
         m["config"]["layers"].push_back(Node("ReLU", {{"name", "extra"}}, {"c"}));
         return m;
       },
       {"layer ReLU 'extra'", "does not lead to the model's output 'out'"}},
      {"batch norm axis",
       [] {
         json m = SmallCnn();
         m["config"]["layers"].insert(
             m["config"]["layers"].begin() + 2,
             testing::KerasLayer("BatchNormalization", {{"name", "bn"}, {"axis", 1}}));
         return m;
       },
       {"layer BatchNormalization 'bn'", "axis 1"}},
      {"zero padding negative",
       [] {
         json m = SmallCnn();
         m["config"]["layers"].insert(
             m["config"]["layers"].begin() + 1,
             testing::KerasLayer("ZeroPadding2D",
                                 {{"name", "pad"}, {"padding", {{0, -1}, {1, 1}}}}));
         return m;
       },
       {"layer ZeroPadding2D 'pad'", "padding [[0,-1],[1,1]] is not supported"}},
      {"zero padding a vector",
       [] {
         json m = SmallCnn();
         m["config"]["layers"].insert(m["config"]["layers"].begin() + 3,
                                      testing::KerasLayer("ZeroPadding2D", {{"name", "pad"}}));
         return m;
       },
       {"layer ZeroPadding2D 'pad'", "needs an input of (height, width, channels)"}},
      {"subclassed",
       [] {
         return json{{"class_name", "MyModel"}, {"config", json::object()}};
       },
       {"only Sequential and Functional"}},
  };
  for (const Refusal& r : refusals) {
    StatusOr<Graph> g = ParseKerasModel(r.model().dump());
    ASSERT_FALSE(g.ok()) << r.what;
    for (const char* part : r.message) {
      EXPECT_NE(g.status().message().find(part), std::string::npos)
          << r.what << ": \"" << part << "\" not in: " << g.status().message();
    }
  }
  EXPECT_EQ(ParseKerasModel("{").status().message(), "not JSON");
  StatusOr<Graph> missing = LoadKerasModel("/nonexistent/model.json");
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  // The models themselves parse.
  EXPECT_TRUE(ParseKerasModel(SmallCnn().dump()).ok());
  EXPECT_TRUE(ParseKerasModel(Residual().dump()).ok());
}

// Sequential models written without an InputLayer take build_input_shape; softmax on the
// output is folded into the loss.
TEST(KerasModelTest, SequentialWithoutInputLayerAndAFinalSoftmax) {
  json m = SmallCnn();
  m["config"]["layers"].erase(0);
  m["config"]["build_input_shape"] = {nullptr, 8, 8, 2};
  m["config"]["layers"][2]["config"]["activation"] = "softmax";
  StatusOr<Graph> g = ParseKerasModel(m.dump());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->input_shape(), (Shape{8, 8, 2, false}));
  EXPECT_TRUE(g->output_softmax);
  EXPECT_EQ(g->parameter_count, 3u * 3 * 2 * 4 + 4 + 6 * 6 * 4 * 3 + 3);
}

// "trainable": false marks a frozen layer (its parameters are not updated in training); the
// layout is the same as without it.
TEST(KerasModelTest, FrozenLayersKeepTheirLayout) {
  json m = SmallCnn();
  m["config"]["layers"][1]["config"]["trainable"] = false;
  StatusOr<Graph> frozen = ParseKerasModel(m.dump());
  StatusOr<Graph> plain = ParseKerasModel(SmallCnn().dump());
  ASSERT_TRUE(frozen.ok()) << frozen.status().message();
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(Named(*frozen, "conv").trainable);
  EXPECT_TRUE(Named(*frozen, "dense").trainable);
  EXPECT_TRUE(Named(*plain, "conv").trainable);
  EXPECT_EQ(frozen->parameter_count, plain->parameter_count);
}

TEST(KerasModelTest, ExampleFilesAreWhatMakeModelsWrites) {
  // Guards the committed files against hand edits: Keras' own fields are all there.
  json m = ExampleModel("resnet_block");
  EXPECT_EQ(m["class_name"], "Functional");
  EXPECT_EQ(m["config"]["layers"][2]["config"]["kernel_initializer"]["class_name"],
            "GlorotUniform");
}

}  // namespace
}  // namespace tj::model
