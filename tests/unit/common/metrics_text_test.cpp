// common/histogram.h, PrometheusText's histograms and declarations, and the process_* metrics
// read from a procfs laid out in a temporary directory (and from the real one).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/histogram.h"
#include "common/process_metrics.h"
#include "common/prometheus_text.h"
#include "tests/support/temp_dir.h"

namespace tj {
namespace {

TEST(Histogram, CumulativeBucketsSumAndCount) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 3.0, 100.0}) h.Observe(v);
  const HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4}));  // 0.1 is within le="0.1"
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 103.65);
}

TEST(PrometheusText, HistogramLinesAndDeclarationsWithoutSamples) {
  Histogram h({0.5, 1});
  h.Observe(0.7);
  PrometheusText t;
  t.Histogram("x_seconds", "X.", h.Snapshot(), {{"verb", "GET"}});
  t.Declare("y", "Not measured yet.", "gauge");
  t.Gauge("y", "ignored", 2);
  EXPECT_EQ(t.str(),
            "# HELP x_seconds X.\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{verb=\"GET\",le=\"0.5\"} 0\n"
            "x_seconds_bucket{verb=\"GET\",le=\"1\"} 1\n"
            "x_seconds_bucket{verb=\"GET\",le=\"+Inf\"} 1\n"
            "x_seconds_sum{verb=\"GET\"} 0.7\n"
            "x_seconds_count{verb=\"GET\"} 1\n"
            "# HELP y Not measured yet.\n# TYPE y gauge\n"
            "y 2\n");
}

class FakeProc : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(root_.Join("42/fd")); }
  void Write(const std::string& rel, const std::string& text) { root_.Write(rel, text); }
  const tj::testing::TempDir root_{"tj-proc"};
};

TEST_F(FakeProc, ReadsCpuMemoryFdsAndStartTime) {
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  // comm with a space and a parenthesis; utime 150, stime 50 ticks, starttime 1000 ticks,
  // vsize 8192000, rss 100 pages.
  Write("42/stat",
        "42 (tj op) x) S 1 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 9 0 1000 8192000 100 "
        "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n");
  Write("stat", "cpu  1 2 3\nbtime 1700000000\nprocesses 5\n");
  Write("42/limits",
        "Limit                     Soft Limit           Hard Limit           Units\n"
        "Max open files            1024                 4096                 files\n");
  for (const char* fd : {"0", "1", "2"}) Write(std::string("42/fd/") + fd, "");
  PrometheusText t;
  RenderProcessMetrics(&t, root_.path(), "42");
  const std::string& m = t.str();
  auto value = [&](const std::string& name) {
    auto at = m.find("\n" + name + " ");
    EXPECT_NE(at, std::string::npos) << name << "\n" << m;
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size() + 2));
  };
  EXPECT_DOUBLE_EQ(value("process_cpu_seconds_total"), 200 / tick);
  EXPECT_DOUBLE_EQ(value("process_resident_memory_bytes"), 100 * page);
  EXPECT_DOUBLE_EQ(value("process_virtual_memory_bytes"), 8192000);
  EXPECT_DOUBLE_EQ(value("process_start_time_seconds"), 1700000000 + 1000 / tick);
  EXPECT_DOUBLE_EQ(value("process_open_fds"), 3);
  EXPECT_DOUBLE_EQ(value("process_max_fds"), 1024);
}

TEST_F(FakeProc, LeavesOutWhatProcfsDoesNotGive) {
  Write("42/stat", "garbage");
  PrometheusText t;
  RenderProcessMetrics(&t, root_.path(), "42");
  EXPECT_EQ(t.str().find("process_cpu_seconds_total"), std::string::npos) << t.str();
  EXPECT_NE(t.str().find("process_open_fds 0"), std::string::npos) << t.str();
}

TEST(ProcessMetrics, ThisProcess) {
  PrometheusText t;
  RenderProcessMetrics(&t);
  const std::string& m = t.str();
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_open_fds", "process_max_fds", "process_start_time_seconds"}) {
    EXPECT_NE(m.find(std::string("\n") + name + " "), std::string::npos) << name << "\n" << m;
  }
  // Started after 2020 and not in the future.
  auto at = m.find("\nprocess_start_time_seconds ");
  ASSERT_NE(at, std::string::npos);
  const double start = std::stod(m.substr(at + 28));
  EXPECT_GT(start, 1.58e9);
  EXPECT_LT(start, double(time(nullptr)) + 5);
}

}  // namespace
}  // namespace tj
