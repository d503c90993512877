#include "processnode/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "tests/support/temp_dir.h"

namespace tj::processnode {
namespace {

namespace fs = std::filesystem;
using tj::testing::ReadBytes;
using tj::testing::TempDir;

ExitInfo WaitExit(pid_t pid) {
  ExitInfo info;
  for (int i = 0; i < 200 && !PollExit(pid, &info); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return info;
}

// Processes of process group `pgid` that are not zombies.
int LiveMembers(pid_t pgid) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string stat = ReadBytes(e.path().string() + "/stat");
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
  const TempDir dir("tj-proc");
  const std::string log = dir.Join("run.log");
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
  EXPECT_EQ(ReadBytes(log), "hello world\nerr\n");
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
  const TempDir dir("tj-proc");
  const std::string log = dir.Join("missing.log");
  ProcessSpec spec;
  spec.argv = {"/nonexistent/binary"};
  spec.log_file = log;
  auto pid = StartProcess(spec);
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(WaitExit(*pid).code, 127);
  EXPECT_NE(ReadBytes(log).find("/nonexistent/binary"), std::string::npos);
}

// Supervised processes (ProcessSpec::exit_file): the outcome survives the parent.

ExitInfo WaitSupervised(pid_t pid, unsigned long long start, const std::string& exit_file,
                        bool* lost) {
  ExitInfo info;
  for (int i = 0; i < 400 && !PollSupervised(pid, start, exit_file, &info, lost); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return info;
}

TEST(SupervisedProcess, ForwardsSigtermAndRecordsTheSignal) {
  const TempDir dir("tj-proc");
  const std::string exit_file = dir.Join("term.exit");
  ProcessSpec spec;
  spec.argv = {"sh", "-c", "echo up; exec sleep 30"};
  spec.log_file = dir.Join("term.log");
  spec.exit_file = exit_file;
  auto pid = StartProcess(spec);
  ASSERT_TRUE(pid.ok()) << pid.status().message();
  const auto start = ProcessStartTime(*pid);
  ASSERT_NE(start, 0u);
  for (int i = 0; i < 200 && ReadBytes(spec.log_file) != "up\n"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  kill(*pid, SIGTERM);  // to the supervisor, as the agent's graceful stop sends it
  bool lost = true;
  ExitInfo info = WaitSupervised(*pid, start, exit_file, &lost);
  EXPECT_TRUE(info.exited);
  EXPECT_FALSE(lost);
  EXPECT_EQ(info.signal, SIGTERM);
  EXPECT_EQ(info.code, 128 + SIGTERM);
  EXPECT_EQ(ReadBytes(exit_file), "143 15\n");
}

TEST(SupervisedProcess, ExitCodeOfAProcessThatIsNotOurChild) {
  // A short-lived intermediate process starts it and exits, as an agent that died would:
  // the supervisor is then nobody's child here, like after a restart of the agent.
  const TempDir dir("tj-proc");
  const std::string exit_file = dir.Join("adopt.exit"), release = dir.Join("adopt.release");
  ProcessSpec spec;
  spec.argv = {"sh", "-c", "while [ ! -f '" + release + "' ]; do sleep 0.05; done; exit 7"};
  spec.log_file = "/dev/null";
  spec.exit_file = exit_file;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    auto pid = StartProcess(spec);
    pid_t p = pid.ok() ? *pid : -1;
    (void)!write(fds[1], &p, sizeof(p));
    _exit(0);
  }
  close(fds[1]);
  pid_t pid = -1;
  ASSERT_EQ(read(fds[0], &pid, sizeof(pid)), static_cast<ssize_t>(sizeof(pid)));
  close(fds[0]);
  waitpid(parent, nullptr, 0);
  ASSERT_GT(pid, 0);
  const auto start = ProcessStartTime(pid);
  ASSERT_NE(start, 0u);
  ExitInfo info;
  bool lost = false;
  EXPECT_FALSE(PollSupervised(pid, start, exit_file, &info, &lost));  // still running
  // Another start time is another process: the one recorded is gone (pid reuse guard).
  EXPECT_TRUE(PollSupervised(pid, start + 1, dir.Join("none.exit"), &info, &lost));
  EXPECT_TRUE(lost);
  EXPECT_EQ(info.code, 137);
  tj::testing::WriteBytes(release, "x");
  info = WaitSupervised(pid, start, exit_file, &lost);
  EXPECT_TRUE(info.exited);
  EXPECT_FALSE(lost);
  EXPECT_EQ(info.code, 7);
  EXPECT_EQ(info.signal, 0);
}

TEST(SupervisedProcess, KilledSupervisorWithoutExitFileIsReportedAsLostOrSignalled) {
  const TempDir dir("tj-proc");
  const std::string exit_file = dir.Join("killed.exit");
  ProcessSpec spec;
  spec.argv = {"sleep", "30"};
  spec.log_file = "/dev/null";
  spec.exit_file = exit_file;
  auto pid = StartProcess(spec);
  ASSERT_TRUE(pid.ok());
  const auto start = ProcessStartTime(*pid);
  SignalGroup(*pid, SIGKILL);  // supervisor and container at once: nothing writes the file
  bool lost = false;
  ExitInfo info = WaitSupervised(*pid, start, exit_file, &lost);
  EXPECT_TRUE(info.exited);
  EXPECT_EQ(info.code, 128 + SIGKILL);  // our child: waitpid tells
  EXPECT_FALSE(fs::exists(exit_file));
}

}  // namespace
}  // namespace tj::processnode
