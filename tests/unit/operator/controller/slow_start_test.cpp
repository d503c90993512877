#include "operator/controller/slow_start.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace tj::controller {
namespace {

// Tasks that take 30 ms each (or as long as asked) and record the order they started in and
// how many ran at once.
class Recorder {
 public:
  std::function<Status()> Task(int index, bool fail = false,
                               std::chrono::milliseconds takes = std::chrono::milliseconds(30)) {
    return [this, index, fail, takes] {
      const int now = ++running_;
      {
        std::lock_guard<std::mutex> lock(mu_);
        order_.push_back(index);
        peak_ = std::max(peak_, now);
      }
      std::this_thread::sleep_for(takes);
      --running_;
      return fail ? Status::Error("task " + std::to_string(index) + " failed") : Status::Ok();
    };
  }
  int peak() const { return peak_; }
  std::vector<int> order() const { return order_; }

 private:
  std::atomic<int> running_{0};
  std::mutex mu_;
  int peak_ = 0;
  std::vector<int> order_;
};

TEST(SlowStart, BatchesDoubleWhileTheySucceed) {
  Recorder r;
  std::vector<std::function<Status()>> tasks;
  tasks.reserve(7);
  for (int i = 0; i < 7; ++i) tasks.push_back(r.Task(i));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(RunSlowStart(tasks, 1).ok());
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.order().size(), 7u);  // every task ran once
  // Batches of 1, 2, 4: three rounds of ~30 ms, not seven.
  EXPECT_LT(took, std::chrono::milliseconds(7 * 30));
  EXPECT_GE(took, std::chrono::milliseconds(3 * 30));
  EXPECT_EQ(r.peak(), 4);
}

TEST(SlowStart, ZeroRunsEverythingAtOnce) {
  Recorder r;
  std::vector<std::function<Status()>> tasks;
  tasks.reserve(5);
  for (int i = 0; i < 5; ++i) tasks.push_back(r.Task(i));
  EXPECT_TRUE(RunSlowStart(tasks, 0).ok());
  EXPECT_EQ(r.peak(), 5);
}

TEST(SlowStart, AFailedBatchStopsTheRestAndReturnsTheFirstFailure) {
  Recorder r;
  std::vector<std::function<Status()>> tasks = {
      r.Task(0), r.Task(1), r.Task(2, /*fail=*/true), r.Task(3, /*fail=*/true),
      r.Task(4), r.Task(5)};
  Status s = RunSlowStart(tasks, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "task 2 failed");
  // Batches {0,1} and {2,3,4,5}: the second failed after all of it had run; nothing after.
  EXPECT_EQ(r.order().size(), 6u);

  Recorder early;
  std::vector<std::function<Status()>> more = {early.Task(0, /*fail=*/true), early.Task(1),
                                               early.Task(2)};
  EXPECT_FALSE(RunSlowStart(more, 1).ok());
  EXPECT_EQ(early.order(), std::vector<int>{0});  // the first batch failed: nothing else ran
}

TEST(SlowStart, ABatchRunsAtMostMaxParallelAtOnce) {
  Recorder r;
  std::vector<std::function<Status()>> tasks;
  tasks.reserve(12);
  for (int i = 0; i < 12; ++i) tasks.push_back(r.Task(i));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(RunSlowStart(tasks, 0, /*max_parallel=*/3).ok());
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.order().size(), 12u);  // every task ran once
  EXPECT_EQ(r.peak(), 3);
  EXPECT_GE(took, std::chrono::milliseconds(4 * 30));  // 12 tasks, 3 at a time
}

TEST(SlowStart, AFailureStopsTheRestOfACappedBatch) {
  Recorder r;
  std::vector<std::function<Status()>> tasks;
  // Task 0 fails after 5 ms, while task 1 runs for 300.
  tasks.push_back(r.Task(0, /*fail=*/true, std::chrono::milliseconds(5)));
  for (int i = 1; i < 8; ++i) {
    tasks.push_back(r.Task(i, /*fail=*/false, std::chrono::milliseconds(300)));
  }
  Status s = RunSlowStart(tasks, 0, /*max_parallel=*/2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "task 0 failed");
  // Tasks 0 and 1 ran together; once 0 had failed no thread took another.
  EXPECT_EQ(r.order().size(), 2u);
}

TEST(SlowStart, NoTasksIsOk) { EXPECT_TRUE(RunSlowStart({}, kFirstPodBatch).ok()); }

}  // namespace
}  // namespace tj::controller
