// Keras 3's .weights.h5 files (keras_weights.h): Keras' group names, a round trip of every
// example model's weights and state, and each refusal naming the layer, the variable, both
// shapes and what to do. That Keras itself reads and writes these files is the TensorFlow
// test's (tests/integration/tensorflow/keras_weights_test.sh).
#include "trainer/model/keras_weights.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/unit/trainer/model/model_json.h"

namespace tj::model {
namespace {

using testing::ExampleModel;
using testing::Input;
using testing::json;
using testing::KerasLayer;
using testing::Sequential;

Graph Parse(const json& model) {
  StatusOr<Graph> g = ParseKerasModel(model.dump());
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(*g) : Graph{};
}

// conv -> bn -> relu -> flatten -> dense -> dense: two layers of one class, a BatchNorm's state.
json SmallModel(int dense_units = 5) {
  return Sequential({Input(6, 6, 1),
                     KerasLayer("Conv2D", {{"name", "c"}, {"filters", 2}, {"kernel_size", {3, 3}}}),
                     KerasLayer("BatchNormalization", {{"name", "bn"}}),
                     KerasLayer("ReLU", {{"name", "r"}}), KerasLayer("Flatten", {{"name", "f"}}),
                     KerasLayer("Dense", {{"name", "d1"}, {"units", dense_units}}),
                     KerasLayer("Dense", {{"name", "d2"}, {"units", 3}})});
}

// Distinct values, so a tensor read into another's place shows.
std::vector<float> Counting(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i) * 0.25f;
  return v;
}

std::string Encode(const Graph& g) {
  StatusOr<std::string> bytes =
      EncodeKerasWeights(g, Counting(g.parameter_count, 1.0f), Counting(g.state_count, -3.0f));
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  return bytes.ok() ? *bytes : std::string();
}

void ExpectRefused(const Graph& g, const std::string& bytes,
                   const std::vector<std::string>& substrings) {
  StatusOr<KerasWeights> read = DecodeKerasWeights(g, bytes);
  ASSERT_FALSE(read.ok());
  for (const std::string& s : substrings) {
    EXPECT_NE(read.status().message().find(s), std::string::npos)
        << "\"" << s << "\" not in: " << read.status().message();
  }
}

TEST(KerasWeightsTest, PathsAreKerasSnakeCaseClassNamesNumberedPerClass) {
  const Graph g = Parse(SmallModel());
  EXPECT_EQ(
      KerasWeightPaths(g),
      (std::vector<std::string>{"", "layers/conv2d", "layers/batch_normalization", "layers/re_lu",
                                "layers/flatten", "layers/dense", "layers/dense_1"}));
  const Graph mobilenet = Parse(ExampleModel("mobilenet_v2_block"));
  std::vector<std::string> paths = KerasWeightPaths(mobilenet);
  EXPECT_NE(std::find(paths.begin(), paths.end(), "layers/depthwise_conv2d"), paths.end());
  paths = KerasWeightPaths(Parse(ExampleModel("resnet_block")));
  EXPECT_NE(std::find(paths.begin(), paths.end(), "layers/global_average_pooling2d"), paths.end());
}

TEST(KerasWeightsTest, EveryExampleModelRoundTrips) {
  for (const char* name : {"seeds_cnn", "bn_dropout_cnn", "resnet_block", "mobilenet_v2_block"}) {
    SCOPED_TRACE(name);
    const Graph g = Parse(ExampleModel(name));
    const std::vector<float> params = Counting(g.parameter_count, 0.5f);
    const std::vector<float> state = Counting(g.state_count, 7.0f);
    StatusOr<std::string> bytes = EncodeKerasWeights(g, params, state);
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    StatusOr<KerasWeights> read = DecodeKerasWeights(g, *bytes);
    ASSERT_TRUE(read.ok()) << read.status().message();
    EXPECT_EQ(read->params, params);
    EXPECT_EQ(read->state, state);
  }
}

TEST(KerasWeightsTest, WrongSizesAreRefusedWhenWriting) {
  const Graph g = Parse(SmallModel());
  StatusOr<std::string> bytes = EncodeKerasWeights(g, {1.0f}, {});
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("the model 'test' has"), std::string::npos);
}

TEST(KerasWeightsTest, AMisShapedVariableIsRefusedNamingBothShapes) {
  ExpectRefused(Parse(SmallModel(5)), Encode(Parse(SmallModel(7))),
                {"layers/dense (layer Dense 'd1')", "variable 0 (d1/kernel, shape (32, 5))",
                 "has shape (32, 7) in the file and (32, 5) in the model", "model.save_weights"});
}

TEST(KerasWeightsTest, AMissingLayerIsRefused) {
  json without_last = SmallModel();
  without_last["config"]["layers"].erase(6);
  json narrow = without_last;  // its last Dense must still give the model an output
  ExpectRefused(
      Parse(SmallModel()), Encode(Parse(narrow)),
      {"layers/dense_1 (layer Dense 'd2')", "no group layers/dense_1/vars", "2 variables"});
}

TEST(KerasWeightsTest, AnExtraLayerIsRefused) {
  json without_last = SmallModel();
  without_last["config"]["layers"].erase(6);
  ExpectRefused(Parse(without_last), Encode(Parse(SmallModel())),
                {"layers/dense_1 (layer 'd2' in the file)", "a layer the model does not have"});
}

// A Dense with use_bias false has one variable; a file with two for it is refused.
TEST(KerasWeightsTest, AnExtraVariableIsRefused) {
  json no_bias = SmallModel();
  no_bias["config"]["layers"][6]["config"]["use_bias"] = false;
  ExpectRefused(Parse(no_bias), Encode(Parse(SmallModel())),
                {"layers/dense_1 (layer Dense 'd2')", "the file has 2 variables", "the model 1"});
  // And the other way round: the bias the model has is missing.
  ExpectRefused(Parse(SmallModel()), Encode(Parse(no_bias)),
                {"layers/dense_1 (layer Dense 'd2')", "lacks variable 1 (d2/bias, shape (3,))"});
}

// Written with the HDF5 C API as another program might: an integer variable, bytes that are
// not HDF5, a file of another layout.
TEST(KerasWeightsTest, FilesOfOtherKindsAreRefused) {
  const Graph g = Parse(SmallModel());
  ExpectRefused(g, "not an hdf5 file", {"not an HDF5 file", ".weights.h5"});
  ExpectRefused(g, "", {"not an HDF5 file"});

  const std::string path = ::testing::TempDir() + "keras_weights_test.h5";
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t vars = H5Gcreate2(
      file, "layers/conv2d/vars",
      [] {
        hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
        H5Pset_create_intermediate_group(lcpl, 1);
        return lcpl;
      }(),
      H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(vars, 0);
  const hsize_t dims[] = {3, 3, 1, 2};
  hid_t space = H5Screate_simple(4, dims, nullptr);
  hid_t set = H5Dcreate2(vars, "0", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<int> zeros(18, 0);
  H5Dwrite(set, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data());
  H5Dclose(set);
  H5Sclose(space);
  H5Gclose(vars);
  H5Fclose(file);
  std::string bytes;
  {
    FILE* in = std::fopen(path.c_str(), "rb");
    ASSERT_NE(in, nullptr);
    char chunk[4096];
    size_t n = 0;
    while ((n = std::fread(chunk, 1, sizeof chunk, in)) > 0) bytes.append(chunk, n);
    std::fclose(in);
  }
  std::remove(path.c_str());
  ExpectRefused(
      g, bytes,
      {"layers/conv2d (layer Conv2D 'c')", "variable 0 (c/kernel", "is not floating point"});

  // A file without "layers" (a Keras 2 .h5, say).
  const std::string other = Encode(g);
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, 1 << 16, 0);
  hid_t empty = H5Fcreate("empty.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Fflush(empty, H5F_SCOPE_GLOBAL);
  std::string empty_bytes(static_cast<size_t>(H5Fget_file_image(empty, nullptr, 0)), '\0');
  H5Fget_file_image(empty, empty_bytes.data(), empty_bytes.size());
  H5Fclose(empty);
  H5Pclose(fapl);
  ExpectRefused(g, empty_bytes, {"no group 'layers'", "not Keras 3's .weights.h5"});
  EXPECT_TRUE(DecodeKerasWeights(g, other).ok());
}

}  // namespace
}  // namespace tj::model
