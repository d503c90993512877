// The CPU backend: nn::CpuStep and nn::Adam on host vectors, in the order the training loop
// ran them before the backend seam existed (so results are bitwise the same). In elastic mode
// a step is several shards, each a batch of its own with its own gradient buffer, computed
// one after the other exactly as a replica of one shard computes it.
#include <algorithm>
#include <string>

#include "trainer/nn/adam.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/model.h"
#include "trainer/train/host_epoch_backend.h"
#include "trainer/train/step_backend.h"

namespace tj::train {
namespace {

class CpuBackend final : public HostEpochBackend {
 public:
  CpuBackend(const data::Dataset& dataset, int batch_size, nn::ThreadPool* pool,
             const nn::cpu::Kernels& kernels, int shards)
      : data_(dataset),
        batch_size_(batch_size),
        pool_(pool),
        kernels_(kernels),
        step_(batch_size, pool, kernels),
        adam_(nn::Layout::kCount, nn::AdamConfig{}, kernels),
        params_(nn::Layout::kCount, 0.0f),
        grads_(static_cast<size_t>(std::max(1, shards)),
               std::vector<float>(kReduceFloatsOnHost, 0.0f)) {}

  std::string description() const override {
    return "cpu (" + std::to_string(pool_->size()) + " threads, " + kernels_.target + ")";
  }
  bool device_buffers() const override { return false; }
  void* device_stream() override { return nullptr; }

  Status SetState(const ModelState& state) override {
    if (state.params.size() != nn::Layout::kCount || state.adam_m.size() != nn::Layout::kCount ||
        state.adam_v.size() != nn::Layout::kCount) {
      return Status::Error("CPU backend: the state's tensors do not have the model's " +
                           std::to_string(nn::Layout::kCount) + " floats");
    }
    params_ = state.params;
    adam_.Restore(state.adam_m, state.adam_v, state.iterations);
    return Status::Ok();
  }
  StatusOr<ModelState> GetState() override {
    return ModelState{params_, adam_.m(), adam_.v(), adam_.iterations(), {}, {}};
  }

  Status ComputeGradients(float scale) override {
    const int64_t rows = int64_t{batch_size_} * shards();
    TJ_RETURN_IF_ERROR(CheckStepFits(rows, "CPU backend"));
    for (int shard = 0; shard < shards(); ++shard) {
      std::vector<float>& grad = grads_[static_cast<size_t>(shard)];
      nn::Batch batch{data_.train.images.data(), data_.train.labels.data(),
                      ShardOrder(shard, batch_size_), batch_size_};
      nn::BatchStats s = step_.ComputeGradients(params_.data(), batch, scale, grad.data());
      grad[nn::Layout::kCount] = static_cast<float>(s.loss_sum);
      grad[nn::Layout::kCount + 1] = static_cast<float>(s.correct);
    }
    return Status::Ok();
  }
  float* reduce_buffer() override { return grads_[0].data(); }
  int shards() const override { return static_cast<int>(grads_.size()); }
  float* shard_buffer(int shard) override {
    return shard >= 0 && shard < shards() ? grads_[static_cast<size_t>(shard)].data() : nullptr;
  }
  Status ApplyUpdate() override {
    const std::vector<float>& grad = grads_[0];  // the sum of every replica's shards
    adam_.Apply(params_.data(), grad.data(), learning_rate(), pool_);
    EndStep(grad[nn::Layout::kCount], grad[nn::Layout::kCount + 1]);
    return Status::Ok();
  }
  Status WaitForSteps() override { return Status::Ok(); }

 private:
  const data::Dataset& data_;
  int batch_size_;
  nn::ThreadPool* pool_;
  const nn::cpu::Kernels& kernels_;
  nn::CpuStep step_;
  nn::Adam adam_;
  std::vector<float> params_;
  // Per shard: gradients, the batch's loss sum and correct count, a stop vote.
  std::vector<std::vector<float>> grads_;
};

}  // namespace

std::unique_ptr<StepBackend> MakeCpuBackend(const data::Dataset& dataset, int batch_size,
                                            nn::ThreadPool* pool, const nn::cpu::Kernels& kernels,
                                            int shards) {
  return std::make_unique<CpuBackend>(dataset, batch_size, pool, kernels, shards);
}

}  // namespace tj::train
