// Batches for the training step, decoded ahead on worker threads while the current step runs:
// the caller submits the next batches' example indices (epoch_order.h's order and shards) and
// takes each batch when it needs it. Each example is read (ImageDataset::ReadImage: a JPEG or
// PNG decoded, an array copied), augmented and normalised to float32, channels last:
//
//   augmentation   random crop with padding: the image is padded with `pad` zero pixels on
//                  every side and an H x W window cut at a random offset (-pad..pad on each
//                  axis), then mirrored left-right with probability 1/2 when `flip` is on
//                  (what Keras' RandomCrop after ZeroPadding2D and RandomFlip("horizontal") do
//                  for CIFAR-10). The draws are a pure function of (seed, epoch, example
//                  index): a batch is the same bytes whatever the number of threads, which
//                  thread decoded which example, or which worker of an elastic run held it.
//   normalisation  out = (pixel / 255 - mean[c]) / std[c], per channel; by default mean 0
//                  and std 1, so values in [0, 1] as the built-in Fashion-MNIST path feeds
//                  them. Padding pixels are 0 before normalisation.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "trainer/data/dataset.h"
#include "trainer/data/epoch_order.h"

namespace tj::data {

struct AugmentOptions {
  int pad = 0;        // random crop with this much zero padding; 0: no crop
  bool flip = false;  // random left-right mirror
};

// Per-channel mean and standard deviation of pixel / 255; empty: 0 and 1.
struct Normalization {
  std::vector<float> mean;
  std::vector<float> stddev;
};

// One example's augmentation: the window's offset from the centre and the mirror.
struct AugmentDraw {
  int shift_y = 0;  // -pad..pad
  int shift_x = 0;
  bool flip = false;
};

// The draw for example `index` of `epoch` (from SplitMix64 seeded with
// DeriveSeed(DeriveSeed(seed, epoch), index)).
AugmentDraw DrawAugmentation(uint64_t seed, int epoch, int index, const AugmentOptions& options);

// `pixels` (shape.Size() bytes) shifted and mirrored as `draw` says, normalised into `out`
// (shape.Size() floats). Normalization's vectors are empty or have shape.channels values.
void AugmentAndNormalize(std::span<const uint8_t> pixels, ImageShape shape, const AugmentDraw& draw,
                         const Normalization& normalization, std::span<float> out);

// This worker's example indices for `step` of an epoch: its slice of `order` as `plan` cuts it
// (plan.ShardsPerReplica() x batch_per_shard consecutive entries from plan.SliceStart(step)).
std::vector<int> StepIndices(const std::vector<uint32_t>& order, const ShardPlan& plan, int step);

struct PrefetchOptions {
  uint64_t seed = 0;
  AugmentOptions augment;
  Normalization normalization;
  // Decoding threads, besides the step's own. 0: none; Next() decodes on the caller's thread
  // (no overlap; the same batches).
  int threads = 1;
};

struct BatchRequest {
  int epoch = 1;
  std::vector<int> indices;  // examples, in the batch's order
  bool augment = true;       // false (evaluation): no crop, no flip
};

struct Batch {
  int epoch = 0;
  ImageShape shape;
  int count = 0;
  std::vector<float> images;    // count x shape.Size(), NHWC
  std::vector<int32_t> labels;  // count
};

class BatchPrefetcher {
 public:
  // `dataset` must outlive the prefetcher. Checks the options against the dataset.
  static StatusOr<std::unique_ptr<BatchPrefetcher>> Create(const ImageDataset& dataset,
                                                           PrefetchOptions options);
  // Stops the threads after the examples they are decoding; batches not taken are dropped.
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Queues a batch; the threads start on it at once, after the batches queued before it. Each
  // queued batch holds its floats until taken: keep two or three ahead, not an epoch.
  // Indices outside the dataset make that batch's Next() an error.
  void Submit(BatchRequest request);
  // The oldest submitted batch, waiting until it is decoded. Its error is the first failed
  // example's (in batch order), naming the file and record. An error too when nothing was
  // submitted.
  StatusOr<Batch> Next();

 private:
  struct Job {
    BatchRequest request;
    Batch batch;
    int claimed = 0;  // positions handed to a thread
    int finished = 0;
    int error_position = -1;
    Status error;
  };

  BatchPrefetcher(const ImageDataset& dataset, PrefetchOptions options);
  void Work();
  // Decodes position `position` of `job` into its batch; `scratch` holds one image.
  Status DecodeOne(Job& job, int position, std::vector<uint8_t>& scratch) const;
  void Finish(Job& job, int position, Status status) TJ_REQUIRES(mu_);

  const ImageDataset& dataset_;
  const PrefetchOptions options_;
  Mutex mu_;
  std::condition_variable_any work_ready_;
  std::condition_variable_any batch_ready_;
  std::deque<std::unique_ptr<Job>> jobs_ TJ_GUARDED_BY(mu_);
  bool stopping_ TJ_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tj::data
