// Frozen layers ("trainable": false) in the engine: a frozen BatchNormalization in training
// computes what an unfrozen one computes in inference (the moving statistics, Keras 3's rule
// for a non-trainable BatchNormalization) and leaves the moving statistics as they are. That
// their parameters are not updated is the training step's (trainer/train/declared_backend.cpp),
// tested with the trainer (tests/integration/tensorflow/keras_weights_test.sh).
#include <gtest/gtest.h>

#include <vector>

#include "tests/unit/trainer/model/model_json.h"
#include "trainer/model/cpu_engine.h"
#include "trainer/model/graph.h"

namespace tj::model {
namespace {

using testing::Input;
using testing::json;
using testing::KerasLayer;
using testing::Sequential;

json BatchNormModel(bool frozen) {
  return Sequential(
      {Input(4, 4, 2), KerasLayer("BatchNormalization", {{"name", "bn"}, {"trainable", !frozen}}),
       KerasLayer("Flatten", {{"name", "f"}}), KerasLayer("Dense", {{"name", "d"}, {"units", 3}})});
}

TEST(FrozenLayersTest, AFrozenBatchNormTrainsInInferenceMode) {
  StatusOr<Graph> frozen = ParseKerasModel(BatchNormModel(true).dump());
  StatusOr<Graph> plain = ParseKerasModel(BatchNormModel(false).dump());
  ASSERT_TRUE(frozen.ok()) << frozen.status().message();
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  const int rows = 5;
  std::vector<float> images(static_cast<size_t>(rows) * 32);
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i % 7) * 0.3f - 0.8f;
  std::vector<int32_t> labels = {0, 1, 2, 1, 0};
  std::vector<uint32_t> index = {0, 1, 2, 3, 4};
  const Batch batch{images.data(), labels.data(), index.data(), rows};
  const std::vector<float> params = InitialParameters(*plain, 3);
  // Moving statistics far from the batch's, so the two modes differ.
  std::vector<float> state = {0.5f, -0.25f, 2.0f, 0.5f};
  nn::ThreadPool pool(1);

  std::vector<float> frozen_state = state, frozen_grad(plain->parameter_count);
  CpuEngine frozen_engine(*frozen, rows, &pool);
  const nn::BatchStats a = frozen_engine.ComputeGradients(params.data(), frozen_state.data(), batch,
                                                          1.0f / rows, frozen_grad.data(), {});

  std::vector<float> inference_state = state, inference_grad(plain->parameter_count);
  CpuEngine plain_engine(*plain, rows, &pool);
  StepOptions inference;
  inference.training = false;
  const nn::BatchStats b = plain_engine.ComputeGradients(
      params.data(), inference_state.data(), batch, 1.0f / rows, inference_grad.data(), inference);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(frozen_grad, inference_grad);
  EXPECT_EQ(frozen_state, state);

  // Unfrozen, training normalises with the batch's statistics and moves the moving ones.
  std::vector<float> training_state = state, training_grad(plain->parameter_count);
  const nn::BatchStats c = plain_engine.ComputeGradients(
      params.data(), training_state.data(), batch, 1.0f / rows, training_grad.data(), {});
  EXPECT_NE(c.loss_sum, a.loss_sum);
  EXPECT_NE(training_state, state);
}

}  // namespace
}  // namespace tj::model
