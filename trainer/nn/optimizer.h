// What a declared model trains with besides Adam (adam.h), as Keras 3 computes it:
//
// SGD (keras.optimizers.SGD), per parameter, with learning rate lr:
//   momentum 0:    w -= lr * g
//   momentum mu:   m = mu * m - lr * g;  w += m                    (m starts at 0)
//   Nesterov:      m = mu * m - lr * g;  w += mu * m - lr * g
// Weight decay (any Keras 3 optimizer's weight_decay; AdamW's decoupled decay), applied to
// the parameters before the update: w -= w * weight_decay * lr.
// Learning-rate schedules: the seeds' by epoch, a constant, steps by epoch, and Keras'
// CosineDecay over the run's optimizer steps with an optional linear warmup.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/nn/thread_pool.h"

namespace tj::nn {

struct SgdConfig {
  float momentum = 0.0f;  // in [0, 1)
  bool nesterov = false;  // needs momentum > 0
};

class Sgd {
 public:
  Sgd(size_t count, SgdConfig config);

  // One update of params[0..count) with gradients grad; elementwise, split over the pool
  // (bitwise the same for any number of threads).
  void Apply(float* params, const float* grad, double learning_rate, ThreadPool* pool);

  int64_t iterations() const { return iterations_; }
  // m of the formula above, per parameter (empty without momentum: plain SGD keeps no state).
  const std::vector<float>& momentum() const { return momentum_; }
  // Restores the state of a backup; `momentum` must have count values (or none, without
  // momentum).
  void Restore(std::vector<float> momentum, int64_t iterations);

 private:
  SgdConfig config_;
  size_t count_;
  std::vector<float> momentum_;
  int64_t iterations_ = 0;
};

// w -= w * weight_decay * learning_rate over params[0..count), where `decayed` (when not
// empty: one flag per parameter) is non-zero. Elementwise, split over the pool.
void ApplyWeightDecay(float* params, size_t count, double weight_decay, double learning_rate,
                      const std::vector<uint8_t>& decayed, ThreadPool* pool);

// A learning rate for every optimizer step. Written as text (the trainer's --lr-schedule):
//   seeds                       1e-3 for epochs 1-3, 1e-4 for 4-7, 1e-5 after (the default)
//   constant:LR                 LR throughout
//   step:LR@1,LR2@E2,...        LR from epoch 1, LR2 from epoch E2, ... (epochs from 1,
//                               increasing): a CIFAR ResNet's 0.1@1,0.01@91,0.001@136
//   cosine:LR[,warmup=S][,alpha=A]
//                               Keras' CosineDecay: over the run's first S steps the rate
//                               rises linearly from 0 to LR, then falls as
//                               LR * ((1 - A) * (1 + cos(pi * t / D)) / 2 + A), t the steps
//                               since the warmup, D the run's steps after it
class LearningRateSchedule {
 public:
  // The seeds' schedule.
  LearningRateSchedule() = default;
  // An error names the text and what is expected.
  static StatusOr<LearningRateSchedule> Parse(const std::string& text);

  // The rate of the update made at optimizer step `step` (0 for the first update of the run)
  // in epoch `epoch` (from 1), of a run of `total_steps` updates in all.
  double At(int epoch, int64_t step, int64_t total_steps) const;
  // Whether the rate changes within an epoch (cosine), not only between epochs.
  bool PerStep() const { return kind_ == Kind::kCosine; }
  // The text it was parsed from, normalised ("seeds" for the default): what a backup's
  // fingerprint records.
  std::string ToString() const;

 private:
  enum class Kind { kSeeds, kConstant, kStep, kCosine };
  Kind kind_ = Kind::kSeeds;
  std::vector<std::pair<int, double>> steps_;  // (first epoch, rate), increasing epochs
  double rate_ = 0.0;                          // constant's, cosine's peak
  int64_t warmup_ = 0;
  double alpha_ = 0.0;
};

}  // namespace tj::nn
