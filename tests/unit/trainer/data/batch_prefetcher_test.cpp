// The prefetcher's batches: the augmentation and normalisation as documented, bitwise the same
// for any number of threads (over JPEGs, decoded for real), errors in batch order, and the
// step's indices from the epoch order and the shard plan.
#include "trainer/data/batch_prefetcher.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/unit/trainer/data/dataset_files.h"
#include "trainer/data/image_encoder.h"
#include "trainer/data/image_folder_dataset.h"

namespace tj::data {
namespace {

using testing::PatternImage;

std::unique_ptr<InMemoryDataset> Counting(ImageShape shape, int count) {
  std::vector<uint8_t> images(shape.Size() * static_cast<size_t>(count));
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<uint8_t>(i % 251);
  std::vector<int32_t> labels(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) labels[static_cast<size_t>(i)] = i % 10;
  auto dataset = InMemoryDataset::Create("counting", shape, 10, images, labels);
  return std::move(*dataset);
}

TEST(AugmentationTest, DrawsCoverTheRangeAndDependOnSeedEpochAndIndexOnly) {
  const AugmentOptions options{2, true};
  std::set<int> shifts;
  int flips = 0;
  for (int i = 0; i < 1000; ++i) {
    const AugmentDraw d = DrawAugmentation(7, 3, i, options);
    EXPECT_GE(d.shift_y, -2);
    EXPECT_LE(d.shift_y, 2);
    shifts.insert(d.shift_x);
    flips += d.flip ? 1 : 0;
    const AugmentDraw again = DrawAugmentation(7, 3, i, options);
    EXPECT_EQ(d.shift_x, again.shift_x);
    EXPECT_EQ(d.flip, again.flip);
  }
  EXPECT_EQ(shifts.size(), 5u);
  EXPECT_GT(flips, 400);
  EXPECT_LT(flips, 600);
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    const AugmentDraw a = DrawAugmentation(7, 3, i, options);
    const AugmentDraw b = DrawAugmentation(7, 4, i, options);
    differ += a.shift_x != b.shift_x || a.shift_y != b.shift_y || a.flip != b.flip;
  }
  EXPECT_GT(differ, 50);
  const AugmentDraw none = DrawAugmentation(7, 3, 1, AugmentOptions{});
  EXPECT_EQ(none.shift_x, 0);
  EXPECT_EQ(none.shift_y, 0);
  EXPECT_FALSE(none.flip);
}

TEST(AugmentationTest, ShiftsWithZeroPaddingMirrorsAndNormalises) {
  const ImageShape shape{2, 3, 1};
  const std::vector<uint8_t> pixels = {0, 51, 102, 153, 204, 255};
  std::vector<float> out(6);
  AugmentAndNormalize(pixels, shape, {}, {}, out);
  EXPECT_FLOAT_EQ(out[1], 0.2f);
  EXPECT_FLOAT_EQ(out[5], 1.0f);
  // Window one row down and one column right: the last row and column are padding.
  AugmentAndNormalize(pixels, shape, {1, 1, false}, {}, out);
  const std::vector<float> shifted = {0.8f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (size_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(out[i], shifted[i]) << i;
  // Mirrored, no shift.
  AugmentAndNormalize(pixels, shape, {0, 0, true}, {}, out);
  EXPECT_FLOAT_EQ(out[0], 0.4f);
  EXPECT_FLOAT_EQ(out[2], 0.0f);
  // (v / 255 - 0.5) / 0.25; padding is pixel 0, so -2.
  AugmentAndNormalize(pixels, shape, {0, -1, false}, {{0.5f}, {0.25f}}, out);
  EXPECT_FLOAT_EQ(out[0], -2.0f);
  EXPECT_FLOAT_EQ(out[1], (0.0f - 0.5f) * 4.0f);
  EXPECT_FLOAT_EQ(out[2], (0.2f - 0.5f) * 4.0f);
}

TEST(BatchPrefetcherTest, BatchesAreBitwiseTheSameForAnyThreadCountOverRealJpegs) {
  tj::testing::TempDir dir("tj-prefetch");
  const ImageShape file_shape{20, 24, 3};
  for (int i = 0; i < 24; ++i) {
    dir.Write("c" + std::to_string(i % 3) + "/" + std::to_string(i) + ".jpg",
              *EncodeJpeg(PatternImage(file_shape, i), file_shape));
  }
  ImageFolderOptions folder;
  folder.shape = {16, 16, 3};
  auto dataset = OpenImageFolder(dir.path(), folder);
  ASSERT_TRUE(dataset.ok()) << dataset.status().message();
  const std::vector<uint32_t> order = EpochOrder(11, 2, (*dataset)->size());
  ShardPlan plan;
  plan.batch_per_shard = 8;

  std::vector<std::vector<float>> reference;
  for (int threads : {0, 1, 3}) {
    PrefetchOptions options;
    options.seed = 11;
    options.augment = {4, true};
    options.normalization = {{0.5f, 0.4f, 0.3f}, {0.2f, 0.25f, 0.3f}};
    options.threads = threads;
    auto prefetcher = BatchPrefetcher::Create(**dataset, options);
    ASSERT_TRUE(prefetcher.ok()) << prefetcher.status().message();
    const int steps = plan.StepsPerEpoch((*dataset)->size());
    ASSERT_EQ(steps, 3);
    // Two ahead, as the training loop would keep them.
    (*prefetcher)->Submit({2, StepIndices(order, plan, 0)});
    (*prefetcher)->Submit({2, StepIndices(order, plan, 1)});
    for (int step = 0; step < steps; ++step) {
      auto batch = (*prefetcher)->Next();
      ASSERT_TRUE(batch.ok()) << batch.status().message();
      if (step + 2 < steps) (*prefetcher)->Submit({2, StepIndices(order, plan, step + 2)});
      EXPECT_EQ(batch->count, 8);
      EXPECT_EQ(batch->shape, folder.shape);
      for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(batch->labels[static_cast<size_t>(i)],
                  (*dataset)->Label(static_cast<int>(order[static_cast<size_t>(step * 8 + i)])));
      }
      if (threads == 0) {
        reference.push_back(batch->images);
      } else {
        EXPECT_EQ(batch->images, reference[static_cast<size_t>(step)]) << threads << " threads";
      }
    }
  }
}

TEST(BatchPrefetcherTest, EvaluationBatchesAreNotAugmentedAndErrorsComeInBatchOrder) {
  auto dataset = Counting({4, 4, 1}, 10);
  PrefetchOptions options;
  options.augment = {2, true};
  options.threads = 2;
  auto prefetcher = BatchPrefetcher::Create(*dataset, options);
  ASSERT_TRUE(prefetcher.ok());
  (*prefetcher)->Submit({1, {3}, false});
  auto batch = (*prefetcher)->Next();
  ASSERT_TRUE(batch.ok());
  std::vector<uint8_t> pixels(16);
  ASSERT_TRUE(dataset->ReadImage(3, pixels).ok());
  for (int i = 0; i < 16; ++i) {
    EXPECT_FLOAT_EQ(batch->images[static_cast<size_t>(i)],
                    static_cast<float>(pixels[static_cast<size_t>(i)]) / 255.0f);
  }
  (*prefetcher)->Submit({1, {1, 12, 2, -1}});
  auto bad = (*prefetcher)->Next();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "counting: example 12 is not one of its 10");
  auto none = (*prefetcher)->Next();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "no batch was submitted");
  // Batches left queued are dropped when the prefetcher goes.
  (*prefetcher)->Submit({1, {1, 2, 3}});
}

TEST(BatchPrefetcherTest, RefusesOptionsThatDoNotFitTheDataset) {
  auto dataset = Counting({2, 2, 3}, 2);
  PrefetchOptions options;
  options.normalization = {{0.5f}, {0.5f}};
  EXPECT_FALSE(BatchPrefetcher::Create(*dataset, options).ok());
  options.normalization = {{0.5f, 0.5f, 0.5f}, {1.0f, 0.0f, 1.0f}};
  EXPECT_FALSE(BatchPrefetcher::Create(*dataset, options).ok());
  options = {};
  options.augment.pad = -1;
  EXPECT_FALSE(BatchPrefetcher::Create(*dataset, options).ok());
  options = {};
  options.threads = -1;
  EXPECT_FALSE(BatchPrefetcher::Create(*dataset, options).ok());
}

TEST(StepIndicesTest, TakesThisWorkersShardsOfTheStep) {
  std::vector<uint32_t> order(40);
  for (uint32_t i = 0; i < 40; ++i) order[i] = 100 + i;
  ShardPlan plan;
  plan.batch_per_shard = 3;
  plan.shards = 4;
  plan.replicas = 2;
  plan.rank = 1;
  // Global batch 12; step 1 starts at 12; rank 1 takes shards 2 and 3: entries 18..23.
  EXPECT_EQ(StepIndices(order, plan, 1), (std::vector<int>{118, 119, 120, 121, 122, 123}));
}

}  // namespace
}  // namespace tj::data
