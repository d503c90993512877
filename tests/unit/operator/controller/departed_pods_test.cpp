// The last views of gone pods, noted from the pod informer's delete events (departed_pods.h).
#include "operator/controller/departed_pods.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "operator/api/training_job.h"

namespace tj::controller {
namespace {

using nlohmann::json;

json GonePod(const std::string& job, const std::string& name, const std::string& owner_uid,
             const json& status) {
  return {{"metadata",
           {{"name", name},
            {"namespace", "ns"},
            {"labels", {{api::kLabelJobName, job}, {api::kLabelRestartCount, "2"}}},
            {"ownerReferences", json::array({{{"kind", api::kKind},
                                              {"apiVersion", api::kApiVersion},
                                              {"controller", true},
                                              {"uid", owner_uid}}})}}},
          {"status", status}};
}

const json kEvicted = {{"phase", "Running"},
                       {"conditions", json::array({{{"type", "DisruptionTarget"},
                                                    {"status", "True"},
                                                    {"reason", "EvictionByEvictionAPI"}}})}};

TEST(DepartedPods, KeepsHowAJobsPodsEndedForTheJobOfThatUid) {
  FakeClock clock;
  DepartedPods departed(&clock);
  departed.Note(GonePod("a", "a-worker-1", "uid-a", kEvicted));
  departed.Note(GonePod("a", "a-worker-2", "uid-a", {{"phase", "Running"}}));  // says nothing
  departed.Note(GonePod("b", "b-worker-0", "uid-b", kEvicted));
  const std::vector<PodView> a = departed.Of("ns/a", "uid-a");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].name, "a-worker-1");
  EXPECT_EQ(a[0].gang, 2);
  EXPECT_EQ(a[0].disruption, "EvictionByEvictionAPI");
  EXPECT_TRUE(a[0].being_deleted);
  // A job of the same name created again is another job.
  EXPECT_TRUE(departed.Of("ns/a", "uid-a2").empty());
  EXPECT_TRUE(departed.Of("other/a", "uid-a").empty());
  clock.Advance(std::chrono::minutes(11));
  EXPECT_TRUE(departed.Of("ns/a", "uid-a").empty());
  EXPECT_EQ(departed.Of("ns/b", "uid-b").size(), 0u);
}

TEST(DepartedPods, HoldsABoundedNumberOfPodsTheOldestGoingFirst) {
  FakeClock clock;
  DepartedPods departed(&clock);
  for (size_t i = 0; i < DepartedPods::kMaxPods + 5; ++i) {
    departed.Note(GonePod("j" + std::to_string(i % 3), "p" + std::to_string(i), "u", kEvicted));
    clock.Advance(std::chrono::milliseconds(1));
  }
  size_t kept = 0;
  for (int j = 0; j < 3; ++j) kept += departed.Of("ns/j" + std::to_string(j), "u").size();
  EXPECT_EQ(kept, DepartedPods::kMaxPods);
  bool first_kept = false;
  for (const PodView& v : departed.Of("ns/j0", "u")) first_kept = first_kept || v.name == "p0";
  EXPECT_FALSE(first_kept);
}

}  // namespace
}  // namespace tj::controller
