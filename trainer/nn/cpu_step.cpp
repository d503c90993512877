#include "trainer/nn/cpu_step.h"

#include <algorithm>

#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/model.h"

namespace tj::nn {
namespace {
constexpr int kConvParams = 9 * kConvChannels + kConvChannels;  // 320
}

CpuStep::CpuStep(int max_rows, ThreadPool* pool, const cpu::Kernels& kernels)
    : max_rows_(std::max(1, max_rows)),
      pool_(pool),
      kernels_(kernels),
      pooled_(static_cast<size_t>(max_rows_) * kFlat),
      argmax_(static_cast<size_t>(max_rows_) * kFlat),
      hidden_(static_cast<size_t>(max_rows_) * kHidden),
      logits_(static_cast<size_t>(max_rows_) * kClasses),
      dlogits_(static_cast<size_t>(max_rows_) * kClasses),
      dhidden_(static_cast<size_t>(max_rows_) * kHidden),
      dpooled_(static_cast<size_t>(max_rows_) * kFlat),
      conv_grads_(static_cast<size_t>(max_rows_) * kConvParams),
      row_loss_(max_rows_),
      row_correct_(max_rows_) {}

void CpuStep::RowsForwardBackward(const float* params, const Batch& batch, int r0, int r1,
                                  float scale, bool backward) {
  if (r0 >= r1) return;
  const int rows = r1 - r0;
  const float* conv_w = params + Layout::kConvKernel;
  const float* conv_b = params + Layout::kConvBias;
  for (int r = r0; r < r1; ++r) {
    const float* image = batch.images + static_cast<size_t>(batch.index[r]) * kInputPixels;
    kernels_.conv_relu_pool_forward(image, conv_w, conv_b, &pooled_[static_cast<size_t>(r) * kFlat],
                                    &argmax_[static_cast<size_t>(r) * kFlat]);
  }
  float* pooled = &pooled_[static_cast<size_t>(r0) * kFlat];
  float* hidden = &hidden_[static_cast<size_t>(r0) * kHidden];
  float* logits = &logits_[static_cast<size_t>(r0) * kClasses];
  kernels_.dense_forward(pooled, rows, kFlat, params + Layout::kDense1Kernel,
                         params + Layout::kDense1Bias, kHidden, /*relu=*/true, hidden);
  kernels_.dense_forward(hidden, rows, kHidden, params + Layout::kDense2Kernel,
                         params + Layout::kDense2Bias, kClasses, /*relu=*/false, logits);
  for (int r = r0; r < r1; ++r) {
    bool correct = false;
    const int label = batch.labels[batch.index[r]];
    row_loss_[r] =
        cpu::SoftmaxCrossEntropy(&logits_[static_cast<size_t>(r) * kClasses], kClasses, label,
                                 scale, &dlogits_[static_cast<size_t>(r) * kClasses], &correct);
    row_correct_[r] = correct;
  }
  if (!backward) return;
  float* dhidden = &dhidden_[static_cast<size_t>(r0) * kHidden];
  float* dpooled = &dpooled_[static_cast<size_t>(r0) * kFlat];
  kernels_.dense_backward_input(&dlogits_[static_cast<size_t>(r0) * kClasses], rows, kClasses,
                                params + Layout::kDense2Kernel, kHidden, hidden, dhidden);
  kernels_.dense_backward_input(dhidden, rows, kHidden, params + Layout::kDense1Kernel, kFlat,
                                pooled, dpooled);
  for (int r = r0; r < r1; ++r) {
    const float* image = batch.images + static_cast<size_t>(batch.index[r]) * kInputPixels;
    float* g = &conv_grads_[static_cast<size_t>(r) * kConvParams];
    kernels_.conv_backward_params(image, &argmax_[static_cast<size_t>(r) * kFlat],
                                  &dpooled_[static_cast<size_t>(r) * kFlat], g,
                                  g + 9 * kConvChannels);
  }
}

BatchStats CpuStep::ComputeGradients(const float* params, const Batch& batch, float scale,
                                     float* grad) {
  const int rows = batch.rows;
  // Phase 1: every member takes a contiguous range of images through forward, loss and the
  // per-image part of backward.
  pool_->Run([&](int member, int members) {
    auto [r0, r1] = SplitRange(rows, members, member);
    RowsForwardBackward(params, batch, r0, r1, scale, /*backward=*/true);
  });
  // Phase 2: the weight gradients, summed over all rows in row order; members split the
  // dense1 outputs in blocks of 8; member 0 also does the small layers.
  pool_->Run([&](int member, int members) {
    constexpr int kBlocks = kHidden / 8;
    auto [b0, b1] = SplitRange(kBlocks, members, member);
    kernels_.dense_backward_weights(dhidden_.data(), rows, kHidden, pooled_.data(), kFlat, b0 * 8,
                                    b1 * 8, grad + Layout::kDense1Kernel);
    if (member != 0) return;
    kernels_.dense_backward_weights(dlogits_.data(), rows, kClasses, hidden_.data(), kHidden, 0,
                                    kClasses, grad + Layout::kDense2Kernel);
    float* db1 = grad + Layout::kDense1Bias;
    float* db2 = grad + Layout::kDense2Bias;
    float* dconv = grad + Layout::kConvKernel;  // kernel then bias: 320 contiguous floats
    std::fill(db1, db1 + kHidden, 0.0f);
    std::fill(db2, db2 + kClasses, 0.0f);
    std::fill(dconv, dconv + kConvParams, 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < kHidden; ++j) db1[j] += dhidden_[static_cast<size_t>(r) * kHidden + j];
      for (int j = 0; j < kClasses; ++j) db2[j] += dlogits_[static_cast<size_t>(r) * kClasses + j];
      const float* g = &conv_grads_[static_cast<size_t>(r) * kConvParams];
      for (int j = 0; j < kConvParams; ++j) dconv[j] += g[j];
    }
  });
  BatchStats stats;
  stats.rows = rows;
  for (int r = 0; r < rows; ++r) {
    stats.loss_sum += row_loss_[r];
    stats.correct += row_correct_[r];
  }
  return stats;
}

BatchStats CpuStep::Evaluate(const float* params, const Batch& batch) {
  BatchStats stats;
  for (int start = 0; start < batch.rows; start += max_rows_) {
    Batch chunk = batch;
    chunk.index = batch.index + start;
    chunk.rows = std::min(max_rows_, batch.rows - start);
    pool_->Run([&](int member, int members) {
      auto [r0, r1] = SplitRange(chunk.rows, members, member);
      RowsForwardBackward(params, chunk, r0, r1, 1.0f, /*backward=*/false);
    });
    for (int r = 0; r < chunk.rows; ++r) {
      stats.loss_sum += row_loss_[r];
      stats.correct += row_correct_[r];
    }
    stats.rows += chunk.rows;
  }
  return stats;
}

}  // namespace tj::nn
