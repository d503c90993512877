// The backups stopped chiefs reported, noted from pod events (reported_backups.h): what a pass
// still knows of a pod that left the cache before it was read.
#include "operator/controller/reported_backups.h"

#include <gtest/gtest.h>

#include "common/clock.h"
#include "operator/api/training_job.h"

namespace tj::controller {
namespace {

using nlohmann::json;

json EndedPod(const std::string& job, const std::string& message) {
  return {
      {"metadata",
       {{"name", job + "-worker-0"}, {"namespace", "ns"}, {"labels", {{api::kLabelJobName, job}}}}},
      {"status",
       {{"phase", "Failed"},
        {"containerStatuses", json::array({{{"name", "trainer"},
                                            {"state",
                                             {{"terminated",
                                               {{"exitCode", 75},
                                                {"finishedAt", "2026-01-01T00:00:10Z"},
                                                {"message", message}}}}}}})}}}};
}

TEST(ReportedBackups, TheNewestPerJobUntilItIsTenMinutesOld) {
  FakeClock clock;
  ReportedBackups backups(&clock);
  EXPECT_TRUE(backups.Newest("ns/a").is_null());
  backups.Note(EndedPod("a", R"({"lastBackup":{"epoch":3,"step":236}})"));
  backups.Note(EndedPod("a", R"({"lastBackup":{"epoch":3,"step":200}})"));  // older: kept out
  backups.Note(EndedPod("b", R"({"lastBackup":{"epoch":1,"step":5}})"));
  backups.Note(EndedPod("c", "the program's own last words"));
  EXPECT_EQ(backups.Newest("ns/a"), (json{{"epoch", 3}, {"step", 236}}));
  EXPECT_EQ(backups.Newest("ns/b"), (json{{"epoch", 1}, {"step", 5}}));
  EXPECT_TRUE(backups.Newest("ns/c").is_null());
  EXPECT_TRUE(backups.Newest("other/a").is_null());
  backups.Note(EndedPod("a", R"({"lastBackup":{"epoch":4,"step":1}})"));
  EXPECT_EQ(backups.Newest("ns/a"), (json{{"epoch", 4}, {"step", 1}}));
  clock.Advance(std::chrono::minutes(11));
  EXPECT_TRUE(backups.Newest("ns/a").is_null());
}

}  // namespace
}  // namespace tj::controller
