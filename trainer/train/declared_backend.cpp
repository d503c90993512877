// The declared model's CPU backend (step_backend.h, MakeDeclaredCpuBackend): model::CpuEngine
// and the recipe's optimizer (nn::Adam or nn::Sgd, optimizer.h) on host vectors, shard after shard
// as the built-in CPU backend computes them. The reduce buffer is the gradients (parameter_count
// floats), the moving statistics each shard updated (state_count floats), the loss sum, the correct
// count and the stop vote. Each step's examples of this replica (all its shards, one request) come
// from a BatchPrefetcher that decodes the next steps' while this one computes.
#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "common/random.h"
#include "trainer/model/cpu_engine.h"
#include "trainer/nn/adam.h"
#include "trainer/nn/optimizer.h"
#include "trainer/train/declared_model.h"
#include "trainer/train/host_epoch_backend.h"
#include "trainer/train/recipe.h"
#include "trainer/train/step_backend.h"

namespace tj::train {
namespace {

// The stream of the Dropout masks: far from the epoch orders' (DeriveSeed(seed, epoch)) and
// the initial values' (DeriveSeed(seed, 1001 + k)).
constexpr uint64_t kDropoutStream = 0x44524f504f555453ULL;  // "DROPOUTS"

// The Dropout seed of `shard` (of the global batch) in optimizer step `global_step` (from 0).
uint64_t DropoutSeed(uint64_t seed, int64_t global_step, int shard) {
  return DeriveSeed(
      DeriveSeed(DeriveSeed(seed, kDropoutStream), static_cast<uint64_t>(global_step)),
      static_cast<uint64_t>(shard));
}

// Frozen layers ("trainable": false): the [offset, offset + size) ranges of the parameter
// vector that are not trained. Their summed gradients are zeroed before the update, so their
// Adam moments (or SGD momentum) stay 0 and the update adds exactly 0, and weight decay passes
// them by (DecayMask): the tensors keep their bits, on every replica alike (each zeroes the
// same all-reduced floats).
std::vector<std::pair<size_t, size_t>> FrozenRanges(const model::Graph& graph) {
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const model::Layer& layer : graph.layers) {
    if (layer.trainable) continue;
    for (const model::Tensor& t : layer.params) ranges.emplace_back(t.offset, t.size);
  }
  return ranges;
}

// Weight decay's mask of nn::ApplyWeightDecay: 1 for every parameter but the frozen ranges'.
std::vector<uint8_t> DecayMask(size_t count, const std::vector<std::pair<size_t, size_t>>& frozen) {
  std::vector<uint8_t> mask(count, 1);
  for (const auto& [offset, size] : frozen) {
    std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(offset), size, uint8_t{0});
  }
  return mask;
}

class DeclaredCpuBackend final : public HostEpochBackend {
 public:
  DeclaredCpuBackend(const DeclaredModel& model, const DeclaredInput& input, int batch_size,
                     nn::ThreadPool* pool, const nn::cpu::Kernels& kernels, ShardRange shards,
                     uint64_t seed, const DeclaredTraining& training)
      : graph_(model.graph),
        input_(input),
        batch_size_(batch_size),
        pool_(pool),
        kernels_(kernels),
        shard_range_(shards),
        seed_(seed),
        params_count_(model.graph.parameter_count),
        state_count_(model.graph.state_count),
        frozen_(FrozenRanges(model.graph)),
        engine_(model.graph, batch_size, pool, kernels),
        recipe_(training.recipe),
        schedule_(ScheduleOf(training.recipe)),
        total_steps_(training.total_steps),
        adam_(recipe_.optimizer == OptimizerKind::kAdam ? params_count_ : 0, nn::AdamConfig{},
              kernels),
        sgd_(recipe_.optimizer == OptimizerKind::kSgd ? params_count_ : 0,
             {.momentum = static_cast<float>(recipe_.momentum), .nesterov = recipe_.nesterov}),
        decay_mask_(recipe_.weight_decay > 0.0 ? DecayMask(params_count_, frozen_)
                                               : std::vector<uint8_t>{}),
        params_(params_count_, 0.0f),
        state_(state_count_, 0.0f),
        shard_state_(state_count_, 0.0f),
        grads_(static_cast<size_t>(std::max(1, shards.count)),
               std::vector<float>(params_count_ + state_count_ + 3, 0.0f)),
        rows_(static_cast<size_t>(batch_size)) {
    std::iota(rows_.begin(), rows_.end(), 0u);
    engine_.SetLabelSmoothing(static_cast<float>(recipe_.label_smoothing));
  }

  std::string description() const override {
    return "cpu (" + std::to_string(pool_->size()) + " threads, " + kernels_.target + ")";
  }
  bool device_buffers() const override { return false; }
  void* device_stream() override { return nullptr; }
  size_t parameter_count() const override { return params_count_; }
  size_t reduce_floats() const override { return params_count_ + state_count_ + 3; }

  Status SetState(const ModelState& state) override {
    const bool adam = recipe_.optimizer == OptimizerKind::kAdam;
    const size_t adam_count = adam ? params_count_ : 0;
    const size_t momentum_count = !adam && recipe_.momentum > 0.0 ? params_count_ : 0;
    if (state.params.size() != params_count_ || state.adam_m.size() != adam_count ||
        state.adam_v.size() != adam_count || state.sgd_momentum.size() != momentum_count ||
        state.model_state.size() != state_count_) {
      return Status::Error("declared model " + graph_.name + ": the state's tensors do not have " +
                           "the model's " + std::to_string(params_count_) + " parameters, " +
                           std::to_string(state_count_) + " floats of moving statistics and " +
                           OptimizerName(recipe_.optimizer) + "'s state");
    }
    params_ = state.params;
    state_ = state.model_state;
    if (adam) {
      adam_.Restore(state.adam_m, state.adam_v, state.iterations);
    } else {
      sgd_.Restore(state.sgd_momentum, state.iterations);
    }
    return Status::Ok();
  }
  StatusOr<ModelState> GetState() override {
    if (recipe_.optimizer == OptimizerKind::kAdam) {
      return ModelState{params_, adam_.m(), adam_.v(), adam_.iterations(), state_, {}};
    }
    return ModelState{params_, {}, {}, sgd_.iterations(), state_, sgd_.momentum()};
  }

  // A new prefetcher for the epoch (the last one's batches, of steps past a stop, dropped),
  // decoding from the step the epoch starts at.
  Status BeginEpoch(int epoch, const std::vector<uint32_t>& order, int64_t first_slice,
                    int64_t slice_stride, double learning_rate) override {
    TJ_RETURN_IF_ERROR(
        HostEpochBackend::BeginEpoch(epoch, order, first_slice, slice_stride, learning_rate));
    prefetcher_.reset();
    auto prefetcher = data::BatchPrefetcher::Create(*input_.dataset, input_.prefetch);
    if (!prefetcher.ok()) return prefetcher.status().WithContext(input_.dataset->source());
    prefetcher_ = std::move(*prefetcher);
    next_slice_ = first_slice;
    submitted_ = 0;
    while (submitted_ < std::max(1, input_.prefetch_batches) && SubmitNext()) {
    }
    return Status::Ok();
  }

  Status ComputeGradients(float scale) override {
    const int64_t rows = int64_t{batch_size_} * shards();
    TJ_RETURN_IF_ERROR(CheckStepFits(rows, "declared-model backend"));
    if (prefetcher_ == nullptr || submitted_ == 0) {
      return Status::Error("declared-model backend: a step without its batch (BeginEpoch first)");
    }
    StatusOr<data::Batch> batch = prefetcher_->Next();
    --submitted_;
    if (!batch.ok()) {
      return batch.status().WithContext("reading the training batch of epoch " +
                                        std::to_string(epoch()));
    }
    SubmitNext();
    const size_t image_size = input_.dataset->shape().Size();
    for (int shard = 0; shard < shards(); ++shard) {
      std::vector<float>& buffer = grads_[static_cast<size_t>(shard)];
      const size_t first = static_cast<size_t>(shard) * static_cast<size_t>(batch_size_);
      const model::Batch batch_of_shard{batch->images.data() + first * image_size,
                                        batch->labels.data() + first, rows_.data(), batch_size_};
      model::StepOptions options;
      options.dropout_seed = DropoutSeed(seed_, iterations(), shard_range_.first + shard);
      // Every shard updates the step's statistics from its own batch; their sum rides along.
      std::copy(state_.begin(), state_.end(), shard_state_.begin());
      nn::BatchStats s = engine_.ComputeGradients(params_.data(), shard_state_.data(),
                                                  batch_of_shard, scale, buffer.data(), options);
      std::copy(shard_state_.begin(), shard_state_.end(),
                buffer.begin() + static_cast<std::ptrdiff_t>(params_count_));
      buffer[params_count_ + state_count_] = static_cast<float>(s.loss_sum);
      buffer[params_count_ + state_count_ + 1] = static_cast<float>(s.correct);
    }
    return Status::Ok();
  }
  float* reduce_buffer() override { return grads_[0].data(); }
  int shards() const override { return static_cast<int>(grads_.size()); }
  float* shard_buffer(int shard) override {
    return shard >= 0 && shard < shards() ? grads_[static_cast<size_t>(shard)].data() : nullptr;
  }
  Status ApplyUpdate() override {
    const std::vector<float>& sum = grads_[0];  // the sum of every replica's shards
    const auto total = static_cast<float>(shard_range_.total);
    for (size_t i = 0; i < state_count_; ++i) state_[i] = sum[params_count_ + i] / total;
    for (const auto& [offset, size] : frozen_) {
      std::fill_n(grads_[0].begin() + static_cast<std::ptrdiff_t>(offset), size, 0.0f);
    }
    // Keras 3's order: the decay at the step's rate, then the optimizer's update.
    const double rate = schedule_.At(epoch(), iterations(), total_steps_);
    nn::ApplyWeightDecay(params_.data(), params_count_, recipe_.weight_decay, rate, decay_mask_,
                         pool_);
    if (recipe_.optimizer == OptimizerKind::kAdam) {
      adam_.Apply(params_.data(), sum.data(), rate, pool_);
    } else {
      sgd_.Apply(params_.data(), sum.data(), rate, pool_);
    }
    EndStep(sum[params_count_ + state_count_], sum[params_count_ + state_count_ + 1]);
    return Status::Ok();
  }
  Status WaitForSteps() override { return Status::Ok(); }

 private:
  // Optimizer steps so far, of the whole run: the schedule's step and the Dropout seeds'.
  int64_t iterations() const {
    return recipe_.optimizer == OptimizerKind::kAdam ? adam_.iterations() : sgd_.iterations();
  }
  // Queues the examples of the step at next_slice_ (all this replica's shards) when the
  // epoch has that step; false when it has not.
  bool SubmitNext() {
    const int64_t rows = int64_t{batch_size_} * shards();
    const int64_t step = next_slice_ / slice_stride();
    if ((input_.steps_per_epoch > 0 && step >= input_.steps_per_epoch) ||
        next_slice_ + rows > static_cast<int64_t>(order().size())) {
      return false;
    }
    data::BatchRequest request;
    request.epoch = epoch();
    request.indices.reserve(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      request.indices.push_back(static_cast<int>(order()[static_cast<size_t>(next_slice_ + i)]));
    }
    prefetcher_->Submit(std::move(request));
    next_slice_ += slice_stride();
    ++submitted_;
    return true;
  }

  const model::Graph& graph_;
  DeclaredInput input_;
  int batch_size_;
  nn::ThreadPool* pool_;
  const nn::cpu::Kernels& kernels_;
  ShardRange shard_range_;
  uint64_t seed_;
  size_t params_count_, state_count_;
  std::vector<std::pair<size_t, size_t>> frozen_;  // FrozenRanges
  model::CpuEngine engine_;
  RecipeOptions recipe_;
  nn::LearningRateSchedule schedule_;
  int64_t total_steps_;
  nn::Adam adam_;  // the one the recipe names updates; the other holds no parameters
  nn::Sgd sgd_;
  std::vector<uint8_t> decay_mask_;  // DecayMask, with weight decay
  std::vector<float> params_;
  std::vector<float> state_;        // the moving statistics, the same on every replica
  std::vector<float> shard_state_;  // one shard's update of them
  // Per shard: gradients, updated statistics, the batch's loss sum and correct count, a vote.
  std::vector<std::vector<float>> grads_;
  std::vector<uint32_t> rows_;  // 0..batch_size - 1: a shard's rows of the decoded batch
  std::unique_ptr<data::BatchPrefetcher> prefetcher_;
  int64_t next_slice_ = 0;  // the order's offset of the next step to queue
  int submitted_ = 0;       // steps queued and not yet taken
};

}  // namespace

std::unique_ptr<StepBackend> MakeDeclaredCpuBackend(const DeclaredModel& model,
                                                    const DeclaredInput& input, int batch_size,
                                                    nn::ThreadPool* pool,
                                                    const nn::cpu::Kernels& kernels,
                                                    ShardRange shards, uint64_t seed,
                                                    const DeclaredTraining& training) {
  return std::make_unique<DeclaredCpuBackend>(model, input, batch_size, pool, kernels, shards, seed,
                                              training);
}

}  // namespace tj::train
