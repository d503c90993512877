// The NCCL communicator on device buffers: one rank, two ranks on two GPUs (one thread per
// rank, bootstrapped through an in-process test double of the Gloo communicator), and a
// silent peer that must cost the waiting rank exactly its collective timeout, not a hang.
#include "trainer/collective/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/gpu/gpu_require.h"

namespace tj::collective {
namespace {

using std::chrono::milliseconds;

// Broadcast between threads of this process (what Gloo does between processes); the other
// operations are not needed to bootstrap NCCL.
class InProcessBootstrap {
 public:
  explicit InProcessBootstrap(int size) : size_(size) {}

  class Rank final : public Communicator {
   public:
    Rank(InProcessBootstrap* shared, int rank) : shared_(shared), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return shared_->size_; }
    Status AllReduceSum(float*, size_t) override {
      return Status::Error("InProcessBootstrap: host all-reduce is not part of the test double");
    }
    Status Broadcast(void* data, size_t bytes, int root) override {
      std::unique_lock lock(shared_->mu_);
      if (rank_ == root) {
        shared_->bytes_.assign(static_cast<char*>(data), static_cast<char*>(data) + bytes);
        ++shared_->generation_;
        shared_->cv_.notify_all();
        return Status::Ok();
      }
      if (!shared_->cv_.wait_for(lock, std::chrono::seconds(30),
                                 [&] { return shared_->generation_ > seen_; })) {
        return Status::Error("InProcessBootstrap: no broadcast within 30 s");
      }
      ++seen_;
      std::memcpy(data, shared_->bytes_.data(), std::min(bytes, shared_->bytes_.size()));
      return Status::Ok();
    }
    Status Barrier() override { return Status::Ok(); }

   private:
    InProcessBootstrap* shared_;
    int rank_;
    int seen_ = 0;
  };

 private:
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> bytes_;
  int generation_ = 0;
};

struct DeviceRank {
  cudaStream_t stream = nullptr;
  float* buffer = nullptr;
  DeviceRank(int device, size_t count) {
    cudaSetDevice(device);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaMalloc(&buffer, count * sizeof(float));
  }
  ~DeviceRank() {
    cudaFree(buffer);
    cudaStreamDestroy(stream);
  }
};

NcclOptions Options(Communicator* bootstrap, int device, void* stream, milliseconds timeout) {
  NcclOptions o;
  o.bootstrap = bootstrap;
  o.device = device;
  o.stream = stream;
  o.init_timeout = milliseconds(60000);
  o.collective_timeout = timeout;
  return o;
}

TEST(NcclCommunicatorTest, OneRankAllReduceLeavesTheDataAsItWas) {
  TJ_REQUIRE_GPU();
  InProcessBootstrap shared(1);
  InProcessBootstrap::Rank bootstrap(&shared, 0);
  const size_t n = 347148;  // the trainer's gradients plus loss and correct
  DeviceRank dev(0, n);
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f - 3.0f;
  ASSERT_EQ(cudaMemcpy(dev.buffer, host.data(), n * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto comm = ConnectNccl(Options(&bootstrap, 0, dev.stream, milliseconds(30000)));
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  EXPECT_EQ((*comm)->size(), 1);
  Status s = (*comm)->AllReduceSum(dev.buffer, n);
  ASSERT_TRUE(s.ok()) << s.message();
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), dev.buffer, n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back, host);
}

TEST(NcclCommunicatorTest, TwoRanksOnTwoGpusSumExactly) {
  TJ_REQUIRE_GPUS(2);
  InProcessBootstrap shared(2);
  const size_t n = 347148;
  std::vector<std::vector<float>> results(2);
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    InProcessBootstrap::Rank bootstrap(&shared, rank);
    DeviceRank dev(rank, n);
    // Small integers: their sum is exact in float32 whatever the reduction order.
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i + rank * 7) % 64);
    cudaMemcpy(dev.buffer, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();  // the copy ran on the legacy stream, NCCL runs on dev.stream
    auto comm = ConnectNccl(Options(&bootstrap, rank, dev.stream, milliseconds(30000)));
    if (!comm.ok()) {
      errors[rank] = comm.status().message();
      return;
    }
    if (Status s = (*comm)->AllReduceSum(dev.buffer, n); !s.ok()) errors[rank] = s.message();
    results[rank].resize(n);
    cudaMemcpy(results[rank].data(), dev.buffer, n * sizeof(float), cudaMemcpyDeviceToHost);
  };
  std::thread r1(rank_main, 1);
  rank_main(0);
  r1.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (size_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(i % 64 + (i + 7) % 64);
    ASSERT_EQ(results[0][i], want) << i;
    ASSERT_EQ(results[1][i], want) << i;
  }
}

TEST(NcclCommunicatorTest, ASilentPeerCostsTheCollectiveTimeoutThenTheCommunicatorIsBroken) {
  TJ_REQUIRE_GPUS(2);
  InProcessBootstrap shared(2);
  const size_t n = 1024;
  const milliseconds timeout(2000);
  std::string error, second_error;
  double waited_s = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool rank0_done = false;
  auto rank_main = [&](int rank) {
    InProcessBootstrap::Rank bootstrap(&shared, rank);
    DeviceRank dev(rank, n);
    auto comm = ConnectNccl(Options(&bootstrap, rank, dev.stream, timeout));
    if (!comm.ok()) {
      if (rank == 0) error = "connect: " + comm.status().message();
      return;
    }
    if (rank == 1) {  // alive but silent: never joins the all-reduce
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(60), [&] { return rank0_done; });
      return;
    }
    auto start = std::chrono::steady_clock::now();
    Status s = (*comm)->AllReduceSum(dev.buffer, n);
    waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    error = s.message();
    second_error = (*comm)->AllReduceSum(dev.buffer, n).message();
    std::lock_guard lock(mu);
    rank0_done = true;
    cv.notify_all();
  };
  std::thread r1(rank_main, 1);
  rank_main(0);
  r1.join();
  EXPECT_NE(error.find("--collective-timeout"), std::string::npos) << error;
  EXPECT_NE(error.find("aborted"), std::string::npos) << error;
  EXPECT_GE(waited_s, 2.0);
  EXPECT_LT(waited_s, 10.0);
  EXPECT_EQ(second_error, error);
}

}  // namespace
}  // namespace tj::collective
