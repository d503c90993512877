#include "trainer/nn/adam.h"

#include <cmath>

namespace tj::nn {
Adam::Adam(size_t count, AdamConfig config, const cpu::Kernels& kernels)
    : config_(config),
      kernels_(&kernels),
      first_moment_(count, 0.0f),
      second_moment_(count, 0.0f) {}

void Adam::Apply(float* params, const float* grad, double learning_rate, ThreadPool* pool) {
  ++iterations_;
  const double t = static_cast<double>(iterations_);
  const float alpha =
      static_cast<float>(learning_rate * std::sqrt(1.0 - std::pow(config_.beta2, t)) /
                         (1.0 - std::pow(config_.beta1, t)));
  const float b1 = 1.0f - config_.beta1, b2 = 1.0f - config_.beta2;
  const int count = static_cast<int>(first_moment_.size());
  pool->Run([&](int member, int members) {
    auto [begin, end] = SplitRange(count, members, member);
    kernels_->adam_update(params + begin, grad + begin, first_moment_.data() + begin,
                          second_moment_.data() + begin, end - begin, alpha, b1, b2,
                          config_.epsilon);
  });
}

void Adam::Restore(std::vector<float> m, std::vector<float> v, int64_t iterations) {
  first_moment_ = std::move(m);
  second_moment_ = std::move(v);
  iterations_ = iterations;
}

double LearningRateForEpoch(int epoch) {
  if (epoch <= 3) return 1e-3;
  if (epoch <= 7) return 1e-4;
  return 1e-5;
}

}  // namespace tj::nn
