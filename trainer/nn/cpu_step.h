// The training step and the evaluation of the seeds' model on the CPU: forward, loss and
// backward over a batch, parallel over a ThreadPool. Results are bitwise independent of the
// number of threads for one SIMD target (see cpu_kernels.h). Not thread-safe: one caller at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/thread_pool.h"

namespace tj::nn {

// A batch: row r is image images[index[r]] (784 floats) with label labels[index[r]].
struct Batch {
  const float* images = nullptr;
  const uint8_t* labels = nullptr;
  const uint32_t* index = nullptr;
  int rows = 0;
};

struct BatchStats {
  double loss_sum = 0.0;  // sum of the per-image losses (not scaled)
  int correct = 0;
  int rows = 0;
};

class CpuStep {
 public:
  // `max_rows`: the largest batch ComputeGradients will see. The pool is borrowed; `kernels`
  // (one SIMD target's, of the process's life) compute.
  CpuStep(int max_rows, ThreadPool* pool, const cpu::Kernels& kernels = cpu::BestKernels());

  // Gradients of (sum of per-image losses) x `scale` w.r.t. `params` into grad[Layout::kCount]
  // (overwritten). With scale = 1 / global batch, summing the gradients of all replicas gives
  // the gradient of the global batch's mean loss.
  BatchStats ComputeGradients(const float* params, const Batch& batch, float scale, float* grad);

  // Forward pass only, over `batch` in chunks of max_rows.
  BatchStats Evaluate(const float* params, const Batch& batch);

 private:
  // Forward (and, if `backward`, the per-image backward) of rows [r0, r1) of `batch`.
  void RowsForwardBackward(const float* params, const Batch& batch, int r0, int r1, float scale,
                           bool backward);

  int max_rows_;
  ThreadPool* pool_;
  const cpu::Kernels& kernels_;
  std::vector<float> pooled_;         // rows x 5408
  std::vector<uint8_t> argmax_;       // rows x 5408
  std::vector<float> hidden_;         // rows x 64
  std::vector<float> logits_;         // rows x 10
  std::vector<float> dlogits_;        // rows x 10
  std::vector<float> dhidden_;        // rows x 64
  std::vector<float> dpooled_;        // rows x 5408
  std::vector<float> conv_grads_;     // rows x 320: per-image conv kernel and bias gradients
  std::vector<double> row_loss_;      // rows
  std::vector<uint8_t> row_correct_;  // rows
};

}  // namespace tj::nn
