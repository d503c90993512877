// A non-finite loss or gradient stops training: the real training loop and CPU backend on a
// small synthetic dataset, with one replica's gradient poisoned at one step (a stand-in for a
// divergence, which the real data cannot be made to produce on demand). Every replica stops
// at that same step with kExitNonFinite and a message naming the step and the value; the
// backups and checkpoints hold only the finite states from before it.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/forwarding_backend.h"
#include "tests/support/synthetic_dataset.h"
#include "tests/support/temp_dir.h"
#include "trainer/checkpoint/backup_manager.h"
#include "trainer/train/training_loop.h"

namespace tj::train {
namespace {

namespace fs = std::filesystem;
using tj::testing::ReadAll;
using tj::testing::TempDir;

// Sums across the threads of one test, in rank order (so every rank gets bitwise the same
// floats, as the real collectives guarantee). A fake of the collective for this logic test.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), slots_(size) {}

  Status AllReduceSum(int rank, float* data, size_t count) {
    return Exchange(rank, data, count * sizeof(float), [&](std::vector<char>* out) {
      std::vector<float> sum(count, 0.0f);
      for (const auto& slot : slots_) {
        const auto* f = reinterpret_cast<const float*>(slot.data());
        for (size_t i = 0; i < count; ++i) sum[i] += f[i];
      }
      out->assign(reinterpret_cast<const char*>(sum.data()),
                  reinterpret_cast<const char*>(sum.data()) + count * sizeof(float));
    });
  }
  Status Broadcast(int rank, void* data, size_t bytes, int root) {
    return Exchange(rank, data, bytes, [&](std::vector<char>* out) { *out = slots_[root]; });
  }
  int size() const { return size_; }

 private:
  // Every rank deposits its bytes; the last one computes `combine` into the result; every
  // rank copies the result out.
  template <typename Combine>
  Status Exchange(int rank, void* data, size_t bytes, Combine combine) {
    std::unique_lock<std::mutex> lock(mu_);
    // A replica that stopped while the others wait is this test's failure, not a hang.
    constexpr auto kDeadline = std::chrono::seconds(30);
    if (!cv_.wait_for(lock, kDeadline, [&] { return !draining_; }))
      return Status::Error("a replica did not reach the collective");
    const auto* p = static_cast<const char*>(data);
    slots_[rank].assign(p, p + bytes);
    if (++arrived_ == size_) {
      combine(&result_);
      draining_ = true;
      cv_.notify_all();
    } else {
      if (!cv_.wait_for(lock, kDeadline, [&] { return draining_; }))
        return Status::Error("a replica did not reach the collective");
    }
    if (result_.size() == bytes) std::memcpy(data, result_.data(), bytes);
    if (--arrived_ == 0) {
      draining_ = false;
      cv_.notify_all();
    }
    return Status::Ok();
  }

  const int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<char>> slots_;
  std::vector<char> result_;
  int arrived_ = 0;
  bool draining_ = false;
};

class ThreadCommunicator final : public collective::Communicator {
 public:
  ThreadCommunicator(ThreadGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  Status AllReduceSum(float* data, size_t count) override {
    return group_->AllReduceSum(rank_, data, count);
  }
  Status Broadcast(void* data, size_t bytes, int root) override {
    return group_->Broadcast(rank_, data, bytes, root);
  }
  Status Barrier() override {
    float none = 0.0f;
    return AllReduceSum(&none, 1);
  }

 private:
  ThreadGroup* group_;
  int rank_;
};

// What to poison and how the backend presents itself.
struct Poison {
  int64_t step = 0;  // the optimizer step (1-based) whose gradient is poisoned; 0: none
  float value = 0.0f;
  bool loss = false;    // the loss instead of gradient[7]
  bool device = false;  // claim device buffers: the loop cannot check each step on the host
};

// The real CPU backend; at optimizer step `poison.step` this replica's gradient at index 7
// (or its loss) becomes `poison.value` before the all-reduce.
class PoisoningBackend final : public tj::testing::ForwardingBackend {
 public:
  PoisoningBackend(std::unique_ptr<StepBackend> real, Poison poison)
      : ForwardingBackend(std::move(real)), poison_(poison) {}

  bool device_buffers() const override { return poison_.device; }
  void* device_stream() override { return nullptr; }
  Status ComputeGradients(float scale) override {
    TJ_RETURN_IF_ERROR(ForwardingBackend::ComputeGradients(scale));
    if (++steps_ == poison_.step)
      reduce_buffer()[poison_.loss ? nn::Layout::kCount : 7] = poison_.value;
    return Status::Ok();
  }

 private:
  Poison poison_;
  int64_t steps_ = 0;
};

struct ReplicaResult {
  TrainingOutcome outcome;
  std::string log;
};

const data::Dataset& Dataset() {
  static const data::Dataset dataset = tj::testing::SyntheticDataset(64);
  return dataset;
}

// 2 epochs of 3 steps, a backup after every step.
Options TrainOptions(const TempDir& dir) {
  Options o;
  o.epochs = 2;
  o.batch_size = 4;
  o.steps_per_epoch = 3;
  o.backup_dir = dir.path() + "/backup";
  o.checkpoint_dir = dir.path() + "/checkpoints";
  o.save_freq_steps = 1;
  o.keep_backup = true;
  return o;
}

// Trains `replicas` threads with TrainOptions; replica `poisoned` applies `poison`.
std::vector<ReplicaResult> Train(const TempDir& dir, int replicas, int poisoned, Poison poison) {
  const data::Dataset& dataset = Dataset();
  const Options o = TrainOptions(dir);
  ThreadGroup group(replicas);
  std::vector<ReplicaResult> results(replicas);
  std::vector<std::thread> threads;
  threads.reserve(replicas);
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] {
      nn::ThreadPool pool(1);
      ThreadCommunicator comm(&group, r);
      Poison mine = poison;
      if (r != poisoned) mine.step = 0;
      PoisoningBackend backend(MakeCpuBackend(dataset, o.batch_size, &pool), mine);
      FILE* out = std::tmpfile();
      FILE* err = std::tmpfile();
      {
        EventLog log(LogFormat::kJson, out, err);
        Progress progress;
        TrainingContext c;
        c.options = &o;
        c.dataset = &dataset;
        c.comm = &comm;
        c.pool = &pool;
        c.log = &log;
        c.progress = &progress;
        c.is_chief = r == 0;
        c.backend = &backend;
        c.gradient_comm = &comm;
        results[r].outcome = RunTrainingLoop(c);
      }
      results[r].log = ReadAll(out) + ReadAll(err);
      std::fclose(out);
      std::fclose(err);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// The (completed epochs, step) of the backup a restart restores, {-1, -1} without one.
std::pair<int64_t, int64_t> RestoredPosition(const TempDir& dir, int replicas) {
  FILE* out = std::tmpfile();
  std::pair<int64_t, int64_t> position{-1, -1};
  {
    EventLog log(LogFormat::kJson, out, out);
    checkpoint::BackupManager backups(dir.path() + "/backup", &log, {});
    auto state = backups.Restore(TrainingFingerprint(TrainOptions(dir), replicas, Dataset()));
    if (state.ok() && state->has_value()) position = {(*state)->epoch, (*state)->step};
  }
  std::fclose(out);
  return position;
}

TEST(NonFinite, ACleanRunSucceeds) {
  TempDir dir;
  auto results = Train(dir, 2, -1, {});
  for (const auto& r : results) {
    EXPECT_TRUE(r.outcome.status.ok()) << r.outcome.status.message();
    EXPECT_EQ(r.outcome.exit_code, kExitOk);
  }
  EXPECT_TRUE(fs::exists(dir.path() + "/checkpoints/ckpt-2"));
}

TEST(NonFinite, ANaNGradientOnOneReplicaStopsEveryReplicaBeforeItIsSaved) {
  TempDir dir;
  // Step 5 is the second step of epoch 2: epoch 1's checkpoint and 4 backups exist by then.
  auto results = Train(dir, 2, 1, {.step = 5, .value = std::numeric_limits<float>::quiet_NaN()});
  for (const auto& r : results) {
    EXPECT_EQ(r.outcome.exit_code, kExitNonFinite) << r.outcome.status.message();
    EXPECT_NE(r.outcome.status.message().find(
                  "training diverged at step 2 of epoch 2: the summed gradient[7] is NaN"),
              std::string::npos)
        << r.outcome.status.message();
    EXPECT_NE(r.outcome.status.message().find("change it first"), std::string::npos);
  }
  // A restart restores the finite state after step 1 of epoch 2 (the backup of the NaN step
  // was not taken).
  EXPECT_EQ(RestoredPosition(dir, 2), std::make_pair(int64_t{1}, int64_t{1}));
  // Only epoch 1's checkpoint was written.
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir.path() + "/checkpoints"))
    checkpoints += e.path().filename().string().rfind("ckpt-", 0) == 0 ? 1 : 0;
  EXPECT_LE(checkpoints, 1);
  EXPECT_FALSE(fs::exists(dir.path() + "/checkpoints/ckpt-2"));
}

TEST(NonFinite, AnInfiniteLossStopsTheChiefAlone) {
  TempDir dir;
  auto results =
      Train(dir, 1, 0, {.step = 2, .value = std::numeric_limits<float>::infinity(), .loss = true});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome.exit_code, kExitNonFinite);
  EXPECT_NE(results[0].outcome.status.message().find(
                "training diverged at step 2 of epoch 1: the summed loss is inf"),
            std::string::npos)
      << results[0].outcome.status.message();
  EXPECT_EQ(RestoredPosition(dir, 1), std::make_pair(int64_t{0}, int64_t{1}));
}

}  // namespace
}  // namespace tj::train

namespace tj::train {
namespace {

// On a device the host sees no reduced gradient: the NaN reaches the weights, and the check
// of every state before it is saved stops the run at the next backup instead.
TEST(NonFinite, OnADeviceTheStateIsCheckedBeforeEachSave) {
  TempDir dir;
  auto results = Train(
      dir, 2, 1, {.step = 2, .value = std::numeric_limits<float>::quiet_NaN(), .device = true});
  for (const auto& r : results) {
    EXPECT_EQ(r.outcome.exit_code, kExitNonFinite) << r.outcome.status.message();
  }
  EXPECT_NE(results[0].outcome.status.message().find(
                "training diverged at the save after step 2 of epoch 1: weights[7] is NaN"),
            std::string::npos)
      << results[0].outcome.status.message();
  EXPECT_EQ(RestoredPosition(dir, 2), std::make_pair(int64_t{0}, int64_t{1}));
}

}  // namespace
}  // namespace tj::train
