// The GPU backend's kernel math on the CPU: every kernel's per-element function
// (trainer/cuda/kernel_math.h) run over a real Fashion-MNIST batch, each thread of each launch
// emulated with the launch's shape (trainer/cuda/launch_geometry.h), compared with the CPU
// backend's kernels on the same inputs. cuBLAS's products (dense1 forward, its input and
// weight gradients) and cuDNN's convolution are library calls, not ours: the CPU's
// equivalents stand in for them here, and only a GPU can check the calls themselves
// (docs/trainer.md, "What is verified without a GPU").
#include "trainer/cuda/kernel_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "trainer/cuda/launch_geometry.h"
#include "trainer/data/idx_reader.h"
#include "trainer/nn/adam.h"
#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/model.h"
#include "trainer/nn/thread_pool.h"

namespace tj::cuda {
namespace {

using nn::kClasses;
using nn::kConvChannels;
using nn::kConvOut;
using nn::kFlat;
using nn::kHidden;
using nn::kInputPixels;
using nn::kPoolOut;
using nn::Layout;

const char* kDataDir = "/usr/share/datasets/fashion-mnist";

bool DatasetRequired() {
  return std::getenv("CI") != nullptr || std::getenv("TJ_REQUIRE_DATASET") != nullptr;
}

// Every thread (block b, thread t) of a one-thread-per-element launch over n elements, as the
// kernels' `if (i >= n) return;` lets them through.
template <typename Element>
void ForEachThread(LaunchShape shape, size_t n, Element element) {
  for (int b = 0; b < shape.grid; ++b)
    for (int t = 0; t < shape.block; ++t) {
      const size_t i = static_cast<size_t>(b) * shape.block + t;
      if (i < n) element(i);
    }
}

// |a - b| within an absolute and a relative tolerance: the kernels fuse multiply-adds
// (fmaf) where the CPU's vector code may not, and sum in other orders.
::testing::AssertionResult Near(float a, float b, float tolerance) {
  if (std::fabs(a - b) <= tolerance * (1.0f + std::max(std::fabs(a), std::fabs(b)))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << a << " vs " << b;
}

class KernelMath : public ::testing::Test {
 protected:
  static constexpr int kRows = 64;

  void SetUp() override {
    if (!std::filesystem::exists(std::string(kDataDir) + "/train-images-idx3-ubyte.gz")) {
      if (DatasetRequired()) FAIL() << "Fashion-MNIST not installed at " << kDataDir;
      GTEST_SKIP() << "Fashion-MNIST not installed at " << kDataDir
                   << " (hack/install-deps.sh installs dataset-fashion-mnist)";
    }
    auto data = data::LoadDataset(kDataDir);
    ASSERT_TRUE(data.ok()) << data.status().message();
    dataset_ = std::move(data).value();
    params_ = nn::InitialParameters(7);
    // Biases that are not zero, so that adding them is checked too.
    for (int c = 0; c < kConvChannels; ++c) params_[Layout::kConvBias + c] = 0.01f * (c % 5 - 2);
    for (int j = 0; j < kHidden; ++j) params_[Layout::kDense1Bias + j] = 0.02f * (j % 3 - 1);
    for (int i = 0; i < kRows; ++i) index_.push_back(static_cast<uint32_t>(i * 911 % 60000));
    CpuForwardBackward();
  }

  const float* Image(int r) const {
    return dataset_.train.images.data() + static_cast<size_t>(index_[r]) * kInputPixels;
  }
  int Label(int r) const { return dataset_.train.labels[index_[r]]; }
  const float* P(size_t offset) const { return params_.data() + offset; }

  // The CPU backend's kernels, stage by stage: the reference each GPU stage is held to, and
  // the inputs of the next stage (as the library calls would give them).
  void CpuForwardBackward() {
    pooled_.resize(size_t{kRows} * kFlat);
    argmax_.resize(size_t{kRows} * kFlat);
    for (int r = 0; r < kRows; ++r) {
      nn::cpu::BestKernels().conv_relu_pool_forward(
          Image(r), P(Layout::kConvKernel), P(Layout::kConvBias),
          &pooled_[static_cast<size_t>(r) * kFlat], &argmax_[static_cast<size_t>(r) * kFlat]);
    }
    std::vector<float> zero(kHidden, 0.0f);
    pre_hidden_.resize(kRows * kHidden);  // cuBLAS's product, before the bias and ReLU
    nn::cpu::BestKernels().dense_forward(pooled_.data(), kRows, kFlat, P(Layout::kDense1Kernel),
                                         zero.data(), kHidden, false, pre_hidden_.data());
    hidden_.resize(kRows * kHidden);
    nn::cpu::BestKernels().dense_forward(pooled_.data(), kRows, kFlat, P(Layout::kDense1Kernel),
                                         P(Layout::kDense1Bias), kHidden, true, hidden_.data());
    logits_.resize(kRows * kClasses);
    nn::cpu::BestKernels().dense_forward(hidden_.data(), kRows, kHidden, P(Layout::kDense2Kernel),
                                         P(Layout::kDense2Bias), kClasses, false, logits_.data());
    dlogits_.resize(kRows * kClasses);
    loss_.resize(kRows);
    correct_.resize(kRows);
    for (int r = 0; r < kRows; ++r) {
      bool correct = false;
      loss_[r] = nn::cpu::SoftmaxCrossEntropy(&logits_[r * kClasses], kClasses, Label(r), kScale,
                                              &dlogits_[r * kClasses], &correct);
      correct_[r] = correct;
    }
    dhidden_.resize(kRows * kHidden);
    nn::cpu::BestKernels().dense_backward_input(dlogits_.data(), kRows, kClasses,
                                                P(Layout::kDense2Kernel), kHidden, hidden_.data(),
                                                dhidden_.data());
    dpooled_.resize(size_t{kRows} * kFlat);  // cuBLAS's product: no mask (the kernels apply it)
    nn::cpu::BestKernels().dense_backward_input(
        dhidden_.data(), kRows, kHidden, P(Layout::kDense1Kernel), kFlat, nullptr, dpooled_.data());
  }

  static constexpr float kScale = 1.0f / 128;
  data::Dataset dataset_;
  std::vector<float> params_;
  std::vector<uint32_t> index_;
  std::vector<float> pooled_, pre_hidden_, hidden_, logits_, dlogits_, dhidden_, dpooled_;
  std::vector<uint8_t> argmax_;
  std::vector<double> loss_;
  std::vector<int> correct_;
};

TEST_F(KernelMath, ConvForwardMatchesTheCpuKernel) {
  // ConvReluPoolForward: a block per image, its threads striding over the pooled outputs.
  const LaunchShape shape = ConvForwardPerImage(kRows);
  std::vector<float> pooled(size_t{kRows} * kFlat, -1.0f);
  std::vector<uint8_t> argmax(size_t{kRows} * kFlat, 9);
  for (int r = 0; r < shape.grid; ++r)
    for (int t = 0; t < shape.block; ++t)
      for (int o = t; o < kFlat; o += shape.block) {
        const size_t at = static_cast<size_t>(r) * kFlat + o;
        math::ConvPoolOutput(Image(r), P(Layout::kConvKernel), P(Layout::kConvBias), o, &pooled[at],
                             &argmax[at]);
      }
  int argmax_differs = 0;
  for (size_t i = 0; i < pooled.size(); ++i) {
    ASSERT_TRUE(Near(pooled[i], pooled_[i], 1e-5f)) << "output " << i;
    if (argmax[i] != argmax_[i]) ++argmax_differs;  // only where two window values tie closely
  }
  EXPECT_LT(argmax_differs, 20) << "of " << pooled.size();
}

TEST_F(KernelMath, CudnnPathBiasPoolReluMatchesTheFusedKernel) {
  // cuDNN's conv output without bias, computed here directly; BiasPoolRelu over it must give
  // what the fused kernel gives.
  std::vector<float> y(size_t{kRows} * kConvChannels * kConvOut * kConvOut);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kConvChannels; ++c)
      for (int oy = 0; oy < kConvOut; ++oy)
        for (int ox = 0; ox < kConvOut; ++ox) {
          float a = 0.0f;
          for (int k = 0; k < 9; ++k)
            a = std::fmaf(Image(r)[(oy + k / 3) * 28 + ox + k % 3],
                          params_[Layout::kConvKernel + k * 32 + c], a);
          y[((static_cast<size_t>(r) * kConvChannels + c) * kConvOut + oy) * kConvOut + ox] = a;
        }
  const size_t outputs = size_t{kRows} * kFlat;
  std::vector<float> pooled(outputs);
  std::vector<uint8_t> argmax(outputs);
  ForEachThread(Elementwise(outputs), outputs, [&](size_t i) {
    const size_t r = i / kFlat;
    const int o = static_cast<int>(i % kFlat), c = o % kConvChannels, cell = o / kConvChannels;
    math::BiasPoolReluOutput(&y[(r * kConvChannels + c) * kConvOut * kConvOut],
                             params_[Layout::kConvBias + c], cell, &pooled[i], &argmax[i]);
  });
  for (size_t i = 0; i < outputs; ++i) ASSERT_TRUE(Near(pooled[i], pooled_[i], 1e-5f)) << i;
}

TEST_F(KernelMath, PoolReluBackwardRoutesEachGradientToItsWinner) {
  const size_t pixels = size_t{kRows} * kConvChannels * kConvOut * kConvOut;
  std::vector<float> dy(pixels, 99.0f);
  ForEachThread(Elementwise(pixels), pixels, [&](size_t i) {
    const int pixel = static_cast<int>(i % (kConvOut * kConvOut));
    const size_t plane = i / (kConvOut * kConvOut);
    const int c = static_cast<int>(plane % kConvChannels);
    const size_t r = plane / kConvChannels;
    dy[i] =
        math::PoolReluBackwardPixel(&pooled_[r * kFlat], &argmax_[r * kFlat], &dpooled_[r * kFlat],
                                    c, pixel / kConvOut, pixel % kConvOut);
  });
  // Each window's four pixels sum to the cell's gradient where the ReLU passed it, else 0;
  // exactly the winner carries it.
  for (int r = 0; r < kRows; ++r)
    for (int cell = 0; cell < kPoolOut * kPoolOut; ++cell)
      for (int c = 0; c < kConvChannels; ++c) {
        const size_t at = static_cast<size_t>(r) * kFlat + cell * kConvChannels + c;
        const float want = pooled_[at] > 0.0f ? dpooled_[at] : 0.0f;
        for (int d = 0; d < 4; ++d) {
          const int oy = 2 * (cell / kPoolOut) + d / 2, ox = 2 * (cell % kPoolOut) + d % 2;
          const float got =
              dy[((static_cast<size_t>(r) * kConvChannels + c) * kConvOut + oy) * kConvOut + ox];
          ASSERT_EQ(got, d == argmax_[at] ? want : 0.0f) << "row " << r << " cell " << cell;
        }
      }
}

TEST_F(KernelMath, FilterLayoutConversionsAreInversePermutations) {
  const LaunchShape shape = FilterElements();
  std::vector<int> seen(shape.block, 0);
  for (int t = 0; t < shape.block; ++t) {
    ++seen[math::KcrsSourceOfOurs(t)];
    EXPECT_EQ(math::OursSourceOfKcrs(math::KcrsSourceOfOurs(t)), t);
  }
  for (int n : seen) EXPECT_EQ(n, 1);
  // KCRS [c][k] holds ours [k][c].
  EXPECT_EQ(math::KcrsSourceOfOurs(1 * 9 + 4), 4 * kConvChannels + 1);
}

TEST_F(KernelMath, BiasReluAndHeadMatchTheCpuKernels) {
  std::vector<float> hidden = pre_hidden_;
  ForEachThread(Elementwise(hidden.size()), hidden.size(), [&](size_t i) {
    hidden[i] = math::BiasRelu(hidden[i], params_[Layout::kDense1Bias + i % kHidden]);
  });
  for (size_t i = 0; i < hidden.size(); ++i) ASSERT_TRUE(Near(hidden[i], hidden_[i], 1e-5f)) << i;
  // Head: a block per row; thread j < 10 a logit, thread 0 the loss, every thread a dhidden.
  const LaunchShape head = HeadPerRow(kRows);
  ASSERT_GE(head.block, kClasses);
  for (int r = 0; r < head.grid; ++r) {
    const float* h = &hidden_[r * kHidden];
    float z[kClasses], dz[kClasses];
    for (int j = 0; j < kClasses; ++j) {
      z[j] = math::Logit(h, P(Layout::kDense2Kernel), P(Layout::kDense2Bias), j);
      ASSERT_TRUE(Near(z[j], logits_[r * kClasses + j], 1e-5f)) << "row " << r << " logit " << j;
    }
    int correct = -1;
    const double loss = math::SoftmaxCrossEntropy(z, Label(r), kScale, dz, &correct);
    EXPECT_NEAR(loss, loss_[r], 1e-5 * (1 + loss_[r])) << "row " << r;
    EXPECT_EQ(correct, correct_[r]) << "row " << r;
    for (int j = 0; j < kClasses; ++j) ASSERT_TRUE(Near(dz[j], dlogits_[r * kClasses + j], 1e-5f));
    for (int j = 0; j < head.block; ++j) {
      ASSERT_TRUE(Near(math::HiddenGradient(h, dz, P(Layout::kDense2Kernel), j),
                       dhidden_[r * kHidden + j], 1e-5f))
          << "row " << r << " unit " << j;
    }
  }
}

TEST_F(KernelMath, ConvBackwardMatchesTheCpuKernel) {
  // The kernel: a block per channel, its threads striding over rows x cells, then a tree.
  const LaunchShape shape = ConvBackwardPerChannel();
  std::vector<float> dconv(9 * kConvChannels + kConvChannels);
  for (int c = 0; c < shape.grid; ++c) {
    std::vector<std::vector<float>> partial(10, std::vector<float>(shape.block, 0.0f));
    for (int t = 0; t < shape.block; ++t) {
      float acc[10] = {};
      for (int i = t; i < kRows * kPoolOut * kPoolOut; i += shape.block) {
        const int r = i / (kPoolOut * kPoolOut), cell = i % (kPoolOut * kPoolOut);
        const size_t at = static_cast<size_t>(r) * kFlat + cell * 32 + c;
        math::ConvBackwardCell(Image(r), pooled_[at], dpooled_[at], argmax_[at], cell, acc);
      }
      for (int k = 0; k < 10; ++k) partial[k][t] = acc[k];
    }
    for (int stride = shape.block / 2; stride > 0; stride /= 2)
      for (int t = 0; t < stride; ++t)
        for (int k = 0; k < 10; ++k) partial[k][t] += partial[k][t + stride];
    for (int k = 0; k < 9; ++k) dconv[k * 32 + c] = partial[k][0];
    dconv[288 + c] = partial[9][0];
  }
  // The CPU: per image, then summed in row order (as CpuStep does).
  std::vector<float> want(dconv.size(), 0.0f), one(dconv.size());
  for (int r = 0; r < kRows; ++r) {
    std::vector<float> masked(kFlat);
    for (int i = 0; i < kFlat; ++i) {
      masked[i] = pooled_[static_cast<size_t>(r) * kFlat + i] > 0.0f
                      ? dpooled_[static_cast<size_t>(r) * kFlat + i]
                      : 0.0f;
    }
    nn::cpu::BestKernels().conv_backward_params(Image(r), &argmax_[static_cast<size_t>(r) * kFlat],
                                                masked.data(), one.data(), one.data() + 288);
    for (size_t i = 0; i < want.size(); ++i) want[i] += one[i];
  }
  for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(Near(dconv[i], want[i], 1e-4f)) << i;
}

TEST_F(KernelMath, SmallGradientsMatchTheCpuKernels) {
  std::vector<float> grad(Layout::kCount, 0.0f);
  std::vector<int> written(Layout::kCount, 0);
  ForEachThread(Elementwise(math::kSmallGradients), math::kSmallGradients, [&](size_t t) {
    size_t offset = 0;
    const float g = math::SmallGradient(static_cast<int>(t), hidden_.data(), dlogits_.data(),
                                        dhidden_.data(), kRows, &offset);
    grad[offset] = g;
    ++written[offset];
  });
  std::vector<float> dw2(kClasses * kHidden);
  nn::cpu::BestKernels().dense_backward_weights(dlogits_.data(), kRows, kClasses, hidden_.data(),
                                                kHidden, 0, kClasses, dw2.data());
  for (int i = 0; i < kClasses * kHidden; ++i) {
    ASSERT_EQ(written[Layout::kDense2Kernel + i], 1);
    ASSERT_TRUE(Near(grad[Layout::kDense2Kernel + i], dw2[i], 1e-5f)) << i;
  }
  for (int j = 0; j < kHidden; ++j) {
    float s = 0.0f;
    for (int r = 0; r < kRows; ++r) s += dhidden_[r * kHidden + j];
    ASSERT_EQ(written[Layout::kDense1Bias + j], 1);
    EXPECT_EQ(grad[Layout::kDense1Bias + j], s);
  }
  for (int o = 0; o < kClasses; ++o) {
    float s = 0.0f;
    for (int r = 0; r < kRows; ++r) s += dlogits_[r * kClasses + o];
    ASSERT_EQ(written[Layout::kDense2Bias + o], 1);
    EXPECT_EQ(grad[Layout::kDense2Bias + o], s);
  }
  // Nothing else is written.
  int total = 0;
  for (int n : written) total += n;
  EXPECT_EQ(total, math::kSmallGradients);
}

TEST_F(KernelMath, AdamMatchesTheCpuOptimizerOverSteps) {
  const nn::AdamConfig config;
  nn::Adam cpu(Layout::kCount, config);
  nn::ThreadPool pool(1);
  std::vector<float> w_cpu = params_, w_gpu = params_;
  std::vector<float> m(Layout::kCount, 0.0f), v(Layout::kCount, 0.0f), g(Layout::kCount);
  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = 1e-3f * static_cast<float>(static_cast<int>((i * 7 + step * 13) % 201) - 100);
    }
    cpu.Apply(w_cpu.data(), g.data(), 1e-3, &pool);
    const float a = math::AdamStepSize(1e-3, step, config.beta1, config.beta2);
    ForEachThread(Elementwise(Layout::kCount), Layout::kCount, [&](size_t i) {
      math::AdamUpdate(&w_gpu[i], g[i], &m[i], &v[i], a, 1.0f - config.beta1, 1.0f - config.beta2,
                       config.epsilon);
    });
  }
  for (size_t i = 0; i < Layout::kCount; ++i) {
    ASSERT_TRUE(Near(w_gpu[i], w_cpu[i], 1e-6f)) << i;
    ASSERT_TRUE(Near(m[i], cpu.m()[i], 1e-6f)) << i;
    ASSERT_TRUE(Near(v[i], cpu.v()[i], 1e-6f)) << i;
  }
}

// Every launch shape of the backend, for every batch size the trainer can take: each element
// covered once, no block wholly idle, blocks within the hardware's 1,024 threads, shared
// memory within 48 KiB.
TEST(LaunchGeometry, EveryLaunchCoversItsElementsOnce) {
  for (int rows : {1, 2, 63, 64, 65, 127, 128, 1000, 65536}) {
    const size_t r = static_cast<size_t>(rows);
    for (size_t n : {r, r * kHidden, r * kInputPixels, r * kFlat, r * kConvChannels * 676,
                     size_t{math::kSmallGradients}, size_t{Layout::kCount}}) {
      const LaunchShape s = Elementwise(n);
      ASSERT_LE(s.block, 1024);
      ASSERT_GE(static_cast<size_t>(s.grid) * s.block, n) << n;
      ASSERT_LT(static_cast<size_t>(s.grid - 1) * s.block, n) << n << ": an idle block";
      ASSERT_LE(s.grid, 2147483647);
    }
    EXPECT_EQ(ConvForwardPerImage(rows).grid, rows);
    EXPECT_EQ(HeadPerRow(rows).grid, rows);
  }
  size_t covered = 0;
  std::vector<int> seen(1000, 0);
  ForEachThread(Elementwise(1000), 1000, [&](size_t i) {
    ++seen[i];
    ++covered;
  });
  EXPECT_EQ(covered, 1000u);
  for (int n : seen) EXPECT_EQ(n, 1);
  const LaunchShape head = HeadPerRow(1);
  EXPECT_EQ(head.block, kHidden);  // a thread per hidden unit; the first 10 also do a logit
  EXPECT_GE(head.block, kClasses);
  const LaunchShape conv = ConvBackwardPerChannel();
  EXPECT_EQ(conv.grid, kConvChannels);
  EXPECT_EQ(conv.block & (conv.block - 1), 0) << "the tree reduction needs a power of two";
  EXPECT_LE(10 * conv.block * sizeof(float), 48u * 1024);
  EXPECT_EQ(FilterElements().block, 9 * kConvChannels);
  EXPECT_LE(FilterElements().block, 1024);
}

}  // namespace
}  // namespace tj::cuda
