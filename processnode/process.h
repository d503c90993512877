// Starts one container as a local process: its own process group, stdout and stderr appended
// to a log file, and (when running as root) a private mount namespace in which the pod's
// /etc/hosts and volumes are bind-mounted. Thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tj::processnode {

struct ProcessSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=value, the whole environment
  std::string working_dir;
  std::string log_file;
  bool mount_namespace = false;
  std::string hosts_file;  // bind-mounted over /etc/hosts when mount_namespace
  std::vector<std::pair<std::string, std::string>> binds;  // (source dir, mountPath)
  // When set, the container runs under a supervisor (the returned pid): a forked copy of
  // the caller that holds no file descriptor of it, forwards SIGTERM, SIGINT, SIGHUP,
  // SIGQUIT, SIGUSR1 and SIGUSR2 to the container, and on its end writes "<code> <signal>"
  // to this file (atomically) before exiting with the same code. So the outcome survives
  // the agent: a restarted agent reads it for a process that is no longer its child.
  std::string exit_file;
};

// Forks and execs; returns the pid (also the process group id). An exec failure shows as
// exit code 127 with the reason in the log file.
StatusOr<pid_t> StartProcess(const ProcessSpec& spec);

// Outcome of waitpid: exited with a code, or killed by a signal.
struct ExitInfo {
  bool exited = false;
  int code = 0;  // exit code, or 128 + signal
  int signal = 0;
};
// Non-blocking: nullopt-like `false` while the process runs.
bool PollExit(pid_t pid, ExitInfo* info);
// The kernel's start time of `pid` (clock ticks since boot, /proc/<pid>/stat field 22), or 0
// when there is no such process. With the pid it names one process for
// good: a pid reused by another process has another start time.
unsigned long long ProcessStartTime(pid_t pid);

// Non-blocking outcome of a supervised process (ProcessSpec::exit_file) that may not be our
// child (adopted after a restart of the agent): `false` while the process with this pid
// and start time runs. Once it is gone, the exit file gives the outcome; without one (the
// supervisor itself was killed) it is exit code 137 with `lost` set, as a kubelet reports a
// container whose status it could not recover.
bool PollSupervised(pid_t pid, unsigned long long start_time, const std::string& exit_file,
                    ExitInfo* info, bool* lost);

// Signals the whole process group.
void SignalGroup(pid_t pid, int sig);

}  // namespace tj::processnode
