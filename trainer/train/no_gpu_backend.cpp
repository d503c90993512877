// The GPU backend's entry points in a build without CUDA: no device, and a clear error.
#include "trainer/train/step_backend.h"

namespace tj::train {

int VisibleGpus() { return 0; }

StatusOr<std::unique_ptr<StepBackend>> MakeGpuBackend(const data::Dataset&, int, int) {
  return Status::Error(
      "this tj-trainer was built without CUDA (no nvcc at build time): rebuild with the CUDA "
      "toolkit installed, or use --device cpu");
}

}  // namespace tj::train
