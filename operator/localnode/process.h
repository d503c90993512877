// Starts one container as a local process: its own process group, stdout and stderr appended
// to a log file, and (when running as root) a private mount namespace in which the pod's
// /etc/hosts and volumes are bind-mounted. Thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tj::localnode {

struct ProcessSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=value, the whole environment
  std::string working_dir;
  std::string log_file;
  bool mount_namespace = false;
  std::string hosts_file;  // bind-mounted over /etc/hosts when mount_namespace
  std::vector<std::pair<std::string, std::string>> binds;  // (source dir, mountPath)
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
// Signals the whole process group.
void SignalGroup(pid_t pid, int sig);

}  // namespace tj::localnode
