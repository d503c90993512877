// Where the training step runs: the seam between the training loop (which drives epochs,
// all-reduces, backups and reports) and a device that holds the model and computes. The CPU
// backend wraps nn::CpuStep and nn::Adam unchanged (bitwise the results of before the seam);
// the GPU backend (built with CUDA) wraps cuda::GpuStep; the declared-model backend trains a
// model read from Keras JSON (--model-config) with model::CpuEngine on the CPU. Not
// thread-safe: the training thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/data/batch_prefetcher.h"
#include "trainer/data/dataset.h"
#include "trainer/data/idx_reader.h"
#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/model.h"
#include "trainer/nn/thread_pool.h"
#include "trainer/train/options.h"

namespace tj::train {

struct DeclaredModel;  // declared_model.h

// The built-in model's host reduce_buffer(): the gradients, the batch's loss sum and correct
// count, and a float the backend leaves alone (the training loop's stop vote,
// training_loop.cpp). A declared model's is reduce_floats() long.
inline constexpr size_t kReduceFloatsOnHost = nn::Layout::kCount + 3;

// The model and optimizer state as host vectors (parameter_count() floats each, but
// model_state), for backups, checkpoints, exports and the broadcast of a restored state. The
// optimizer's vectors are its own: Adam's m and v; SGD's momentum (none without momentum).
struct ModelState {
  std::vector<float> params;
  std::vector<float> adam_m;
  std::vector<float> adam_v;
  int64_t iterations = 0;
  // What the model keeps that is not trained: a declared model's BatchNormalization moving
  // statistics (graph.h's state vector). Empty for the built-in model.
  std::vector<float> model_state;
  // A declared model trained by SGD with momentum: nn::Sgd's momentum. Empty otherwise.
  std::vector<float> sgd_momentum;
};

class StepBackend {
 public:
  virtual ~StepBackend() = default;

  // The device, for logs: "cpu (N threads)" or "gpu <index> <name> (...)".
  virtual std::string description() const = 0;
  // True when reduce_buffer() is device memory (an all-reduce must then be NCCL's).
  virtual bool device_buffers() const = 0;
  // The cudaStream_t (as void*) the steps run on, for NCCL; null on the CPU.
  virtual void* device_stream() = 0;
  // The model's trainable parameters: the gradients' part of reduce_buffer(), from its start.
  virtual size_t parameter_count() const { return nn::Layout::kCount; }
  // Floats of a host reduce_buffer(): the gradients, what else the replicas sum (a declared
  // model's moving statistics), the loss sum, the correct count and the stop vote, in that
  // order; the last three are always its last three floats.
  virtual size_t reduce_floats() const { return kReduceFloatsOnHost; }

  virtual Status SetState(const ModelState& state) = 0;
  // Copies the state to the host (synchronises with the device).
  virtual StatusOr<ModelState> GetState() = 0;

  // The running sums of the epoch in progress (per-image loss and correct predictions over
  // every replica); Set restores them from a backup.
  virtual Status SetEpochSums(double loss_sum, double correct) = 0;
  virtual Status GetEpochSums(double* loss_sum, double* correct) = 0;

  // Starts epoch `epoch` (from 1): its image order, the offset of this replica's first row of
  // the next step in it, how far a step moves on (the global batch), and the learning rate.
  // With several shards, shard i's rows start i x batch size after the first.
  virtual Status BeginEpoch(int epoch, const std::vector<uint32_t>& order, int64_t first_slice,
                            int64_t slice_stride, double learning_rate) = 0;
  // This replica's gradients of (sum of losses) x scale into
  // reduce_buffer()[0..parameter_count()), the batch's loss sum and number correct into the
  // two floats before the stop vote; with several shards, each shard's into its own
  // shard_buffer(). May return before the device is done.
  virtual Status ComputeGradients(float scale) = 0;
  // The floats to all-reduce between ComputeGradients and ApplyUpdate: kCount + 2 on a
  // device; reduce_floats() in host memory, where the training loop fills the last one (its
  // stop vote) itself.
  virtual float* reduce_buffer() = 0;
  // Elastic mode: the shards this replica computes per step, each a batch of its own with a
  // buffer of reduce_floats() floats; shard_buffer(0) is reduce_buffer(), where the sum of
  // every replica's shards lands. One outside elastic mode, and on a device.
  virtual int shards() const { return 1; }
  virtual float* shard_buffer(int shard) { return shard == 0 ? reduce_buffer() : nullptr; }
  // Adds the (reduced) loss and correct to the epoch sums, applies Adam, moves the slice on.
  virtual Status ApplyUpdate() = 0;
  // Returns once every step queued so far has finished (at once on the CPU), with the first
  // error the device reported.
  virtual Status WaitForSteps() = 0;
};

// The CPU backend over `pool` (borrowed) with `kernels` (one SIMD target's): the dataset stays
// where `dataset` holds it. Each step computes `shards` batches of `batch_size` (elastic
// mode; 1 otherwise), one after the other, each with its own gradients.
std::unique_ptr<StepBackend> MakeCpuBackend(
    const data::Dataset& dataset, int batch_size, nn::ThreadPool* pool,
    const nn::cpu::Kernels& kernels = nn::cpu::BestKernels(), int shards = 1);

// Which shards of each step a declared-model backend computes: `count` of them, the first being
// shard `first` of the global batch's `total` (rank x count in elastic mode; the rank, of as
// many as replicas, without it). The Dropout masks and the moving statistics depend on these.
struct ShardRange {
  int first = 0;
  int count = 1;
  int total = 1;
};

// Where a declared-model backend's batches come from: `dataset` (borrowed), read by a
// data::BatchPrefetcher with `prefetch`'s augmentation, normalisation and threads, which
// decodes this replica's examples of the next `prefetch_batches` steps while a step computes
// (no step past `steps_per_epoch`, the epoch's last). The batches are the same bytes at every
// thread and worker count (batch_prefetcher.h).
struct DeclaredInput {
  const data::ImageDataset* dataset = nullptr;
  data::PrefetchOptions prefetch;
  int prefetch_batches = 2;
  int steps_per_epoch = 0;  // 0: every step the order has
};

// How a declared-model backend updates the parameters: `recipe`'s optimizer (nn::Adam, or
// nn::Sgd), its weight decay (never of a frozen layer) and loss, at the rate its schedule gives
// each optimizer step of a run of `total_steps` (epochs x steps per epoch). The rate that
// BeginEpoch is given is not used.
struct DeclaredTraining {
  RecipeOptions recipe;
  int64_t total_steps = 0;
};

// The declared model's CPU backend: `model` (borrowed) trained by model::CpuEngine on `pool`
// with `training`'s optimizer and `kernels`, on `input`'s batches. Each shard's Dropout masks are
// seeded by (seed, the global step, the shard's index in the global batch), so a step's masks do
// not depend on how many workers or threads compute it. Each shard updates BatchNormalization's
// moving statistics from its own batch, as Keras does, starting from the step's; the updated
// statistics ride in the reduce buffer after the gradients, and the step's new statistics are their
// sum over the global batch's shards divided by the shard count: every replica holds the same bits.
std::unique_ptr<StepBackend> MakeDeclaredCpuBackend(const DeclaredModel& model,
                                                    const DeclaredInput& input, int batch_size,
                                                    nn::ThreadPool* pool,
                                                    const nn::cpu::Kernels& kernels,
                                                    ShardRange shards, uint64_t seed,
                                                    const DeclaredTraining& training = {});

// The GPU backend on CUDA device `device`: copies the training set there once. Fails when the
// build has no CUDA ("built without CUDA") or the device cannot be used.
StatusOr<std::unique_ptr<StepBackend>> MakeGpuBackend(const data::Dataset& dataset, int batch_size,
                                                      int device);

// CUDA devices visible to this process (0 in a build without CUDA).
int VisibleGpus();

}  // namespace tj::train
