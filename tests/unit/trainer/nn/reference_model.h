// A plain float64 implementation of the seeds' model (no vectorisation, no blocking), used
// as the reference for the fast float32 kernels and for finite differences.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "trainer/nn/model.h"

namespace tj::nn::testing {

// Mean softmax cross-entropy of `rows` images under params (layout of model.h).
inline double ReferenceLoss(const std::vector<double>& p, const std::vector<double>& images,
                            const std::vector<int>& labels) {
  const int rows = static_cast<int>(labels.size());
  double total = 0.0;
  for (int r = 0; r < rows; ++r) {
    const double* x = &images[static_cast<size_t>(r) * kInputPixels];
    std::vector<double> pooled(kFlat);
    for (int py = 0; py < kPoolOut; ++py)
      for (int px = 0; px < kPoolOut; ++px)
        for (int c = 0; c < kConvChannels; ++c) {
          double best = -1e300;
          for (int d = 0; d < 4; ++d) {
            int oy = 2 * py + d / 2, ox = 2 * px + d % 2;
            double a = p[Layout::kConvBias + c];
            for (int ky = 0; ky < 3; ++ky)
              for (int kx = 0; kx < 3; ++kx)
                a += x[(oy + ky) * 28 + ox + kx] * p[Layout::kConvKernel + (ky * 3 + kx) * 32 + c];
            best = std::max(best, std::max(a, 0.0));
          }
          pooled[(py * kPoolOut + px) * 32 + c] = best;
        }
    std::vector<double> h(kHidden);
    for (int o = 0; o < kHidden; ++o) {
      double a = p[Layout::kDense1Bias + o];
      for (int k = 0; k < kFlat; ++k)
        a += pooled[k] * p[Layout::kDense1Kernel + static_cast<size_t>(o) * kFlat + k];
      h[o] = std::max(a, 0.0);
    }
    std::vector<double> z(kClasses);
    double m = -1e300;
    for (int o = 0; o < kClasses; ++o) {
      double a = p[Layout::kDense2Bias + o];
      for (int k = 0; k < kHidden; ++k) a += h[k] * p[Layout::kDense2Kernel + o * kHidden + k];
      z[o] = a;
      m = std::max(m, a);
    }
    double s = 0.0;
    for (double v : z) s += std::exp(v - m);
    total += m + std::log(s) - z[labels[r]];
  }
  return total / rows;
}

}  // namespace tj::nn::testing
