// Adam as Keras implements it (keras.optimizers.Adam, defaults beta1 0.9, beta2 0.999,
// epsilon 1e-7):
//   t += 1; alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
//   m += (g - m) * (1 - beta1);  v += (g^2 - v) * (1 - beta2)
//   w -= alpha * m / (sqrt(v) + epsilon)
// And the seeds' learning-rate schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/thread_pool.h"

namespace tj::nn {

struct AdamConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;
};

class Adam {
 public:
  // `kernels` (one SIMD target's, of the process's life) do the elementwise update.
  explicit Adam(size_t count, AdamConfig config = {},
                const cpu::Kernels& kernels = cpu::BestKernels());

  // One update of params[0..count) with gradients grad; elementwise, split over the pool
  // (bitwise the same for any number of threads).
  void Apply(float* params, const float* grad, double learning_rate, ThreadPool* pool);

  int64_t iterations() const { return iterations_; }
  // m and v of the formula above: the first and second moment estimates, per parameter.
  const std::vector<float>& m() const { return first_moment_; }
  const std::vector<float>& v() const { return second_moment_; }
  // Restores the state of a backup.
  void Restore(std::vector<float> m, std::vector<float> v, int64_t iterations);

 private:
  AdamConfig config_;
  const cpu::Kernels* kernels_;
  std::vector<float> first_moment_, second_moment_;  // m and v
  int64_t iterations_ = 0;
};

// The seeds' schedule: 1e-3 for epochs 1-3, 1e-4 for epochs 4-7, 1e-5 after (epochs from 1).
double LearningRateForEpoch(int epoch);

}  // namespace tj::nn
