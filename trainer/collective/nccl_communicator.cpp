#include "trainer/collective/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <string>

namespace tj::collective {
namespace {

// How often a wait looks at the communicator and the stream.
constexpr auto kPollInterval = std::chrono::microseconds(20);

Status NcclError(ncclResult_t r, ncclComm_t comm, const std::string& what) {
  std::string detail = ncclGetErrorString(r);
  if (comm) {
    const char* last = ncclGetLastError(comm);
    if (last && *last) detail += std::string(" (") + last + ")";
  }
  return Status::Error("NCCL: " + what + ": " + detail);
}

std::string Seconds(std::chrono::milliseconds d) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", d.count() / 1000.0);
  return text;
}

Status CudaError(cudaError_t e, const std::string& what) {
  return Status::Error("CUDA: " + what + ": " + cudaGetErrorString(e));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclOptions& o, Clock* clock)
      : bootstrap_(o.bootstrap),
        device_(o.device),
        stream_(static_cast<cudaStream_t>(o.stream)),
        collective_timeout_(o.collective_timeout),
        clock_(clock) {}
  ~NcclCommunicator() override {
    if (!comm_) return;
    if (broken_.ok()) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }

  Status Init(std::chrono::milliseconds init_timeout) {
    // The chief's id, or why it has none: every rank learns the outcome from the broadcast.
    struct {
      int32_t ok;
      ncclUniqueId id;
    } handout{};
    Status chief_error;
    if (rank() == 0) {
      ncclResult_t r = ncclGetUniqueId(&handout.id);
      handout.ok = r == ncclSuccess;
      if (r != ncclSuccess) chief_error = NcclError(r, nullptr, "ncclGetUniqueId");
    }
    TJ_RETURN_IF_ERROR(bootstrap_->Broadcast(&handout, sizeof handout, 0)
                           .WithContext("handing out the NCCL unique id"));
    if (!chief_error.ok()) return chief_error;
    if (!handout.ok) return Status::Error("the chief could not create an NCCL id; see its log");
    if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
      return CudaError(e, "cudaSetDevice(" + std::to_string(device_) + ")");
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size(), handout.id, rank(), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      return Fail(NcclError(r, comm_, "ncclCommInitRankConfig"));
    }
    return WaitFor(clock_->Now() + init_timeout, /*stream_too=*/false, "ncclCommInitRank",
                   init_timeout);
  }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }

  Status AllReduceSum(float* data, size_t count) override {
    TJ_RETURN_IF_ERROR(broken_);
    const auto deadline = clock_->Now() + collective_timeout_;
    ncclResult_t r = ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_, stream_);
    if (r != ncclSuccess && r != ncclInProgress) return Fail(NcclError(r, comm_, "ncclAllReduce"));
    return WaitFor(deadline, /*stream_too=*/true,
                   "all-reduce of " + std::to_string(count) + " floats", collective_timeout_);
  }
  // Host memory: through the bootstrap communicator.
  Status Broadcast(void* data, size_t bytes, int root) override {
    TJ_RETURN_IF_ERROR(broken_);
    return bootstrap_->Broadcast(data, bytes, root);
  }
  Status Barrier() override {
    TJ_RETURN_IF_ERROR(broken_);
    return bootstrap_->Barrier();
  }

 private:
  // Polls until NCCL has no operation in progress (and, with stream_too, the stream is idle),
  // an error is reported, or the deadline passes (then aborts).
  Status WaitFor(Clock::TimePoint deadline, bool stream_too, const std::string& what,
                 std::chrono::milliseconds limit) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return Fail(NcclError(r, comm_, "ncclCommGetAsyncError"));
      if (state != ncclSuccess && state != ncclInProgress) {
        return Fail(NcclError(
            state, comm_,
            what + " (rank " + std::to_string(rank()) + " of " + std::to_string(size()) + ")"));
      }
      if (state == ncclSuccess) {
        if (!stream_too) return Status::Ok();
        cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return Status::Ok();
        if (e != cudaErrorNotReady) return Fail(CudaError(e, what));
      }
      if (clock_->Now() >= deadline) {
        return Fail(Status::Error(
            "NCCL " + what + " did not finish within " + Seconds(limit) +
            " s (--collective-timeout) on rank " + std::to_string(rank()) + " of " +
            std::to_string(size()) +
            ": a peer is lost or hung (NCCL does not say which); the communicator was aborted"));
      }
      clock_->SleepFor(kPollInterval);
    }
  }
  Status Fail(Status s) {
    if (broken_.ok()) broken_ = s;
    return s;
  }

  Communicator* bootstrap_;
  int device_;
  cudaStream_t stream_;
  std::chrono::milliseconds collective_timeout_;
  Clock* clock_;
  ncclComm_t comm_ = nullptr;
  Status broken_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> ConnectNccl(const NcclOptions& options) {
  if (!options.bootstrap) return Status::Error("ConnectNccl: no bootstrap communicator");
  if (!options.stream) return Status::Error("ConnectNccl: no CUDA stream");
  auto comm =
      std::make_unique<NcclCommunicator>(options, options.clock ? options.clock : RealClock::Get());
  if (Status s = comm->Init(options.init_timeout); !s.ok()) {
    return s.WithContext("connecting NCCL " + NcclVersion() + " on CUDA device " +
                         std::to_string(options.device));
  }
  return std::unique_ptr<Communicator>(std::move(comm));
}

std::string NcclVersion() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "(unknown version)";
  // NCCL >= 2.9: major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace tj::collective
