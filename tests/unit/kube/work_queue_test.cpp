#include "kube/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>
#include <vector>

namespace tj::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A work queue on a fake clock.
class WorkQueueTest : public ::testing::Test {
 protected:
  FakeClock clock;
  WorkQueue q{&clock};
};

TEST_F(WorkQueueTest, DeduplicatesQueuedKeys) {
  q.Add("a");
  q.Add("b");
  q.Add("a");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(q.TryGet(), "a");
  EXPECT_EQ(q.TryGet(), "b");
  EXPECT_EQ(q.TryGet(), std::nullopt);
}

TEST_F(WorkQueueTest, AKeyInFlightIsNotHandedOutAgainUntilDone) {
  q.Add("a");
  ASSERT_EQ(q.TryGet(), "a");
  q.Add("a");  // changed while being processed
  q.Add("a");
  EXPECT_EQ(q.TryGet(), std::nullopt);  // not to a second worker
  q.Done("a");
  EXPECT_EQ(q.TryGet(), "a");  // but once more, after Done
  q.Done("a");
  EXPECT_EQ(q.TryGet(), std::nullopt);
}

TEST_F(WorkQueueTest, CountsTheKeysInFlight) {
  q.Add("a");
  q.Add("b");
  EXPECT_EQ(q.NumProcessing(), 0u);
  ASSERT_EQ(q.TryGet(), "a");
  EXPECT_EQ(q.NumProcessing(), 1u);
  EXPECT_EQ(q.Len(), 1u);
  q.Done("a");
  EXPECT_EQ(q.NumProcessing(), 0u);
}

TEST_F(WorkQueueTest, AddAfterWaitsForTheClockAndTheEarlierTimeWins) {
  q.AddAfter("a", seconds(10));
  q.AddAfter("a", seconds(5));
  q.AddAfter("b", seconds(7));
  EXPECT_EQ(q.NumDelayed(), 2u);
  clock.Advance(seconds(4));
  EXPECT_EQ(q.TryGet(), std::nullopt);
  clock.Advance(seconds(1));
  EXPECT_EQ(q.TryGet(), "a");
  clock.Advance(seconds(2));
  EXPECT_EQ(q.TryGet(), "b");
  EXPECT_EQ(q.NumDelayed(), 0u);
}

TEST_F(WorkQueueTest, RateLimitedRequeuesBackOffExponentiallyUntilForget) {
  for (auto expected : {milliseconds(5), milliseconds(10), milliseconds(20), milliseconds(40)}) {
    q.AddRateLimited("a");
    clock.Advance(expected - milliseconds(1));
    EXPECT_EQ(q.TryGet(), std::nullopt) << expected.count();
    clock.Advance(milliseconds(1));
    ASSERT_EQ(q.TryGet(), "a") << expected.count();
    q.Done("a");
  }
  EXPECT_EQ(q.NumRequeues("a"), 4);
  EXPECT_EQ(q.retries(), 4u);
  q.Forget("a");
  EXPECT_EQ(q.NumRequeues("a"), 0);
  q.AddRateLimited("a");
  clock.Advance(milliseconds(5));
  EXPECT_EQ(q.TryGet(), "a");
}

TEST_F(WorkQueueTest, IdleKeysWaitUntilNoOtherKeyIsQueuedOrInFlight) {
  q.Add("busy");
  q.AddWhenIdle("status", seconds(5));
  EXPECT_EQ(q.NumIdle(), 1u);
  EXPECT_EQ(q.Len(), 1u);  // the idle tier is not in the depth
  ASSERT_EQ(q.TryGet(), "busy");
  EXPECT_TRUE(q.BusyBesides("status"));
  EXPECT_FALSE(q.BusyBesides("busy"));  // its own pass does not count
  EXPECT_EQ(q.TryGet(), std::nullopt);  // "busy" is still in flight
  q.Done("busy");
  EXPECT_EQ(q.TryGet(), "status");
  // Keys handed out from the idle tier do not hold the others back, nor make anyone busy.
  EXPECT_FALSE(q.BusyBesides("status"));
  q.Done("status");
  EXPECT_EQ(q.NumIdle(), 0u);
}

TEST_F(WorkQueueTest, IdleKeysGoTogetherOnSeveralWorkers) {
  q.AddWhenIdle("a", seconds(5));
  q.AddWhenIdle("b", seconds(5));
  ASSERT_EQ(q.TryGet(), "a");
  EXPECT_EQ(q.TryGet(), "b");  // two status writes at once, on two workers
  q.Add("c");
  EXPECT_TRUE(q.BusyBesides("a"));
}

TEST_F(WorkQueueTest, AnIdleKeyGoesAtItsLatestTimeWhateverIsBusy) {
  q.Add("busy");
  ASSERT_EQ(q.TryGet(), "busy");  // and never done
  q.AddWhenIdle("status", seconds(5));
  q.AddWhenIdle("status", seconds(8));  // the earlier time wins
  clock.Advance(seconds(4));
  EXPECT_EQ(q.TryGet(), std::nullopt);
  clock.Advance(seconds(1));
  EXPECT_EQ(q.TryGet(), "status");  // queued like Add now: ahead of nothing, behind nothing
  EXPECT_EQ(q.NumIdle(), 0u);
}

TEST_F(WorkQueueTest, APlainAddSupersedesAnIdleWait) {
  q.Add("busy");
  ASSERT_EQ(q.TryGet(), "busy");
  q.AddWhenIdle("job", seconds(5));
  q.Add("job");  // an informer event: the pass is due now
  EXPECT_EQ(q.NumIdle(), 0u);
  EXPECT_EQ(q.TryGet(), "job");
  q.Done("job");
  q.Add("other");
  q.AddWhenIdle("other", seconds(5));  // already queued: stays so
  EXPECT_EQ(q.NumIdle(), 0u);
  EXPECT_EQ(q.TryGet(), "other");
}

TEST_F(WorkQueueTest, AnIdleKeyDeferredAgainDuringItsOwnPassWaitsForItsDone) {
  q.AddWhenIdle("a", seconds(5));
  ASSERT_EQ(q.TryGet(), "a");
  q.AddWhenIdle("a", seconds(5));       // its pass found other work after all
  EXPECT_EQ(q.TryGet(), std::nullopt);  // never to a second worker
  q.Done("a");
  EXPECT_EQ(q.TryGet(), "a");
}

TEST_F(WorkQueueTest, BlockingGetWakesForAnIdleKeyWhenTheLastBusyKeyIsDone) {
  q.Add("busy");
  ASSERT_EQ(q.TryGet(), "busy");
  q.AddWhenIdle("status", seconds(60));
  std::optional<std::string> got;
  std::thread worker([&] { got = q.Get(); });
  std::this_thread::sleep_for(milliseconds(50));
  q.Done("busy");
  worker.join();
  EXPECT_EQ(got, "status");
}

TEST_F(WorkQueueTest, BlockingGetSeesAFakeClockAdvance) {
  q.AddAfter("later", seconds(30));
  std::thread advancer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    clock.Advance(seconds(30));
  });
  EXPECT_EQ(q.Get(), "later");
  advancer.join();
}

TEST_F(WorkQueueTest, ShutDownWakesWaitersAndIgnoresAdds) {
  std::optional<std::string> got = "unset";
  std::thread worker([&] { got = q.Get(); });
  std::this_thread::sleep_for(milliseconds(20));
  q.ShutDown();
  worker.join();
  EXPECT_EQ(got, std::nullopt);
  q.Add("x");
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_TRUE(q.ShuttingDown());
}

TEST(WorkQueue, ConcurrentWorkersNeverShareAKey) {
  RealClock* clock = RealClock::Get();
  WorkQueue q(clock);
  std::mutex mu;
  std::map<std::string, int> in_flight;
  std::atomic<int> overlaps{0}, processed{0};
  std::vector<std::thread> workers;
  workers.reserve(4);
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.Get()) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (++in_flight[*key] > 1) ++overlaps;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        {
          std::lock_guard<std::mutex> lock(mu);
          --in_flight[*key];
        }
        ++processed;
        q.Done(*key);
      }
    });
  }
  for (int i = 0; i < 2000; ++i) q.Add("key-" + std::to_string(i % 5));
  auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while ((q.Len() > 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  std::this_thread::sleep_for(milliseconds(50));
  q.ShutDown();
  for (auto& w : workers) w.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GE(processed.load(), 5);
  EXPECT_LE(processed.load(), 2000);
}

// client-go's workqueue_queue_duration_seconds and workqueue_work_duration_seconds: from the
// first add to Get(), from Get() to Done(); a key re-added while in flight waits from then.
TEST_F(WorkQueueTest, MeasuresQueueAndWorkDuration) {
  q.Add("a");
  clock.Advance(seconds(2));
  q.Add("a");  // de-duplicated: still waiting since the first add
  auto key = q.TryGet();
  ASSERT_EQ(key, "a");
  clock.Advance(milliseconds(300));
  q.Add("a");  // in flight: queued again at Done(), waiting from now
  clock.Advance(milliseconds(200));
  q.Done("a");
  clock.Advance(seconds(5));
  ASSERT_EQ(q.TryGet(), "a");
  q.Done("a");

  const HistogramSnapshot waited = q.queue_duration();
  ASSERT_EQ(waited.count, 2u);
  EXPECT_DOUBLE_EQ(waited.sum, 2 + 5.2);
  const HistogramSnapshot worked = q.work_duration();
  ASSERT_EQ(worked.count, 2u);
  EXPECT_DOUBLE_EQ(worked.sum, 0.5);
  // Buckets are cumulative: the instant second pass is within 0.1, the 0.5 s one within 1.
  const auto at = [&](const HistogramSnapshot& h, double bound) {
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      if (h.bounds[i] >= bound * 0.999 && h.bounds[i] <= bound * 1.001) return h.cumulative[i];
    }
    ADD_FAILURE() << "no bucket " << bound;
    return uint64_t{0};
  };
  EXPECT_EQ(at(worked, 0.1), 1u);
  EXPECT_EQ(at(worked, 1), 2u);
  EXPECT_EQ(at(waited, 1), 0u);
  EXPECT_EQ(at(waited, 10), 2u);
}

}  // namespace
}  // namespace tj::kube
