// The declared model's training step and evaluation on the CPU: forward over a batch of N
// images, softmax cross-entropy, backward, the gradients of the flat parameter vector (layout
// of graph.h). Layer by layer, each layer split over the rows of the batch among a ThreadPool's
// members (BatchNormalization's statistics and every parameter gradient are summed over the
// rows in row order afterwards), so the results are bitwise the same for any thread count on
// one SIMD target. Not thread-safe: one caller at a time.
//
// How each layer computes:
//   Conv2D     im2col per image (none for a 1x1 convolution of stride 1), then gemm (the
//              general product of trainer/nn/cpu_kernels.h, the output channels along the
//              vector lanes) with bias and activation fused for the output. Backward, per
//              image, d input: stride 1, d output's convolution with the flipped kernel (gemm
//              accumulated onto d input, no col2im); otherwise gemm of d output and the packed
//              kernel, then col2im. The kernel gradient: gemm of d output transposed and each
//              image's patches, accumulated per group of 8 images (the groups split among the
//              members), the groups' partials summed in order. Groups: per group.
//   Dense      dense_forward, dense_backward_input and dense_backward_weights over the whole
//              batch (inputs padded to a multiple of 32 when they are not), as
//              trainer/nn/cpu_step.cpp computes its dense layers
//   DepthwiseConv2D, pooling, BatchNormalization, Rescaling, Add, Dropout, activations:
//              portable loops (layer_kernels.h), statistics in double
// The seeds' Conv2D(32, 3x3, relu) -> MaxPooling2D(2) on 28x28x1 runs as the built-in model's
// fused kernel (conv_relu_pool_forward / conv_backward_params) unless fusion is turned off,
// so that the seeds' CNN declared in JSON computes bitwise what the built-in model does.
//
// A layer of little work (MobileNetV2's late layers, at 2x2 and 1x1 pixels) runs on the
// calling thread alone rather than waking the pool; the bits are the same either way.
//
// Not yet optimised: im2col materialises every patch, twice in the backward pass; depthwise
// convolution, pooling and BatchNormalization are scalar loops the compiler vectorises as it can,
// BatchNormalization not fused with the ReLU after it; every layer keeps its own output and
// gradient buffers (no reuse, no in-place activations).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/model/graph.h"
#include "trainer/nn/cpu_kernels.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/thread_pool.h"

namespace tj::model {

// The rows the engine computes: row r is the NHWC float32 image at images + index[r] x the
// input's size, with label labels[index[r]] (any class index the model's output has).
struct Batch {
  const float* images = nullptr;
  const int32_t* labels = nullptr;
  const uint32_t* index = nullptr;
  int rows = 0;
};

struct StepOptions {
  // BatchNormalization normalises with the batch's statistics and Dropout drops; otherwise
  // (inference) the moving statistics and no dropout.
  bool training = true;
  // Training only: BatchNormalization folds the batch's mean and variance into its moving
  // statistics in `state`, as Keras does (moving = moving * momentum + batch * (1 - momentum)).
  bool update_state = true;
  // Training only: the Dropout masks. Row r of layer i keeps element j when the j-th draw of
  // SplitMix64(DeriveSeed(DeriveSeed(dropout_seed, i), r)) is >= rate, scaling it by
  // 1 / (1 - rate). Give each step (and each shard of a step) its own seed.
  uint64_t dropout_seed = 0;
  // Also compute the loss's gradient with respect to the input images (InputGradient()).
  bool input_gradient = false;
};

// Seconds spent in each layer (index into Graph::layers), summed over the passes since the
// last ResetTimes.
struct LayerTimes {
  std::vector<double> forward, backward;
};

class CpuEngine {
 public:
  // `max_rows`: the largest batch ComputeGradients or one chunk of Evaluate sees. The pool and
  // the graph are borrowed; `kernels` (one SIMD target's, of the process's life) compute.
  CpuEngine(const Graph& graph, int max_rows, nn::ThreadPool* pool,
            const nn::cpu::Kernels& kernels = nn::cpu::BestKernels(), bool fuse = true);
  ~CpuEngine();
  CpuEngine(const CpuEngine&) = delete;
  CpuEngine& operator=(const CpuEngine&) = delete;

  // Gradients of (sum of the rows' losses) x `scale` w.r.t. `params` into
  // grad[graph.parameter_count] (overwritten); with scale = 1 / batch, of the batch's mean
  // loss. Row r is image batch.images + batch.index[r] * input size (NHWC float32) with label
  // batch.labels[batch.index[r]], which must be below the model's class count. `state`
  // (graph.state_count floats) is read, and updated when options.training and
  // options.update_state.
  nn::BatchStats ComputeGradients(const float* params, float* state, const Batch& batch,
                                  float scale, float* grad, const StepOptions& options = {});

  // Forward only, in inference mode, over `batch` in chunks of max_rows. The rows' losses and
  // correct counts are added, in row order, to `sums` (a batch evaluated in pieces, each
  // piece given the sums so far, adds up to the same bits as in one call).
  nn::BatchStats Evaluate(const float* params, const float* state, const Batch& batch,
                          nn::BatchStats sums = {});

  // After a pass: layer i's output for the last chunk's rows (rows x out.size()); the output
  // layer's is the logits (before a folded softmax); null for the conv of a fused seeds' conv +
  // pool pair, whose output is never formed.
  const float* Output(int layer) const;
  // After ComputeGradients with input_gradient: d loss / d input (rows x input size).
  const float* InputGradient() const;

  // Whether the seeds' conv + pool pair runs fused (see above).
  bool fused() const;

  // The loss of both ComputeGradients and Evaluate against smoothed targets
  // onehot(label) x (1 - smoothing) + smoothing / classes, as Keras'
  // CategoricalCrossentropy(label_smoothing) computes it for training and evaluation alike
  // (smoothing in [0, 1); 0, the default: the plain softmax cross-entropy, bit for bit).
  void SetLabelSmoothing(float smoothing) { label_smoothing_ = smoothing; }

  const LayerTimes& times() const { return times_; }
  void ResetTimes();

 private:
  struct Plan;
  std::unique_ptr<Plan> plan_;
  LayerTimes times_;
  float label_smoothing_ = 0.0f;
};

}  // namespace tj::model
