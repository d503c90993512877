#include "operator/localnode/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tj::localnode {
namespace {

namespace fs = std::filesystem;

ExitInfo WaitExit(pid_t pid) {
  ExitInfo info;
  for (int i = 0; i < 200 && !PollExit(pid, &info); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return info;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Processes of process group `pgid` that are not zombies.
int LiveMembers(pid_t pgid) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string stat = Read(e.path().string() + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    long ppid, pgrp;
    if (rest >> state >> ppid >> pgrp && pgrp == pgid && state != 'Z') ++n;
  }
  return n;
}

TEST(Process, ExitCodeEnvAndLog) {
  std::string log = fs::temp_directory_path() / ("tj-proc-" + std::to_string(getpid()) + ".log");
  ProcessSpec spec;
  spec.argv = {"sh", "-c", "echo hello $GREETING; echo err >&2; exit 3"};
  spec.env = {"GREETING=world", "PATH=/usr/bin:/bin"};
  spec.working_dir = "/";
  spec.log_file = log;
  auto pid = StartProcess(spec);
  ASSERT_TRUE(pid.ok()) << pid.status().message();
  ExitInfo info = WaitExit(*pid);
  EXPECT_TRUE(info.exited);
  EXPECT_EQ(info.code, 3);
  EXPECT_EQ(Read(log), "hello world\nerr\n");
  fs::remove(log);
}

TEST(Process, SignalReachesTheWholeGroup) {
  ProcessSpec spec;
  spec.argv = {"sh", "-c", "sleep 30 & wait"};
  spec.log_file = "/dev/null";
  auto pid = StartProcess(spec);
  ASSERT_TRUE(pid.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  SignalGroup(*pid, SIGKILL);
  ExitInfo info = WaitExit(*pid);
  EXPECT_EQ(info.signal, SIGKILL);
  EXPECT_EQ(info.code, 128 + SIGKILL);
  // The background sleep was in the group too: nothing is left running in it (a zombie
  // waiting for init to reap it may remain).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(LiveMembers(*pid), 0);
}

TEST(Process, MissingExecutableExits127WithTheReasonInTheLog) {
  std::string log = fs::temp_directory_path() / ("tj-proc-missing-" + std::to_string(getpid()));
  ProcessSpec spec;
  spec.argv = {"/nonexistent/binary"};
  spec.log_file = log;
  auto pid = StartProcess(spec);
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(WaitExit(*pid).code, 127);
  EXPECT_NE(Read(log).find("/nonexistent/binary"), std::string::npos);
  fs::remove(log);
}

}  // namespace
}  // namespace tj::localnode
