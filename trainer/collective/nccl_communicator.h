// The GPU backend's collectives: NCCL all-reduce on device buffers, one GPU per process.
// Bootstrapped through the host communicator (gloo_communicator.h: a broadcast over the ring,
// whose connections are authenticated with the job's key and the gang's number): the chief
// creates NCCL's unique id and broadcasts it, so no unauthenticated port is opened for the id,
// and the id (which carries the secret magic NCCL's own bootstrap connections must present)
// reaches the gang's ranks only. Built only with CUDA.
//
// The communicator is non-blocking (ncclConfig_t blocking = 0): every wait polls
// ncclCommGetAsyncError and the stream against a deadline, and past it aborts the
// communicator (ncclCommAbort) and returns an error, which the trainer turns into exit 75.
// All-reduces run outside the CUDA graphs of the step (between the gradients graph and the
// update graph), so that a timed-out collective is never part of a graph being replayed.
//
// Status: compiled, NOT yet run on a GPU.
#pragma once

#include <chrono>
#include <memory>

#include "common/clock.h"
#include "common/status.h"
#include "trainer/collective/communicator.h"

namespace tj::collective {

struct NcclOptions {
  // Hands out the unique id; Broadcast and Barrier (host memory) are delegated to it. Borrowed:
  // must outlive the NCCL communicator. Required.
  Communicator* bootstrap = nullptr;
  int device = 0;  // the CUDA device of this process
  // The cudaStream_t (as void*) the all-reduce is enqueued on: the training step's, so that
  // it is ordered after the gradients and before the update. Required.
  void* stream = nullptr;
  // How long ncclCommInitRank may take (every rank must arrive).
  std::chrono::milliseconds init_timeout{300000};
  // The longest an all-reduce may take before the communicator is aborted.
  std::chrono::milliseconds collective_timeout{60000};
  Clock* clock = nullptr;  // null: the real clock
};

// Creates the NCCL communicator of bootstrap->size() ranks. AllReduceSum takes DEVICE
// pointers and returns once the reduced data is in place (the stream's work up to it
// included). Errors: NCCL or CUDA failures (named), the init or a collective past its
// deadline (the communicator is then aborted; later calls return the first error).
StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const NcclOptions& options);

// The NCCL library's version as "2.28.9" (the one loaded at run time).
std::string NcclVersion();

}  // namespace tj::collective
