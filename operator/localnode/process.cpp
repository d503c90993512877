#include "operator/localnode/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tj::localnode {
namespace {

void WriteAll(int fd, const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

// mkdir -p with async-signal-safe calls only (runs between fork and exec).
void MakeDirs(char* path) {
  for (char* p = path + 1; *p; ++p) {
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0755);
      *p = '/';
    }
  }
  mkdir(path, 0755);
}

[[noreturn]] void Fail(const char* what) {
  const char* err = strerror(errno);
  WriteAll(2, "tj-local-node: ");
  WriteAll(2, what);
  WriteAll(2, ": ");
  WriteAll(2, err);
  WriteAll(2, "\n");
  _exit(127);
}

}  // namespace

StatusOr<pid_t> StartProcess(const ProcessSpec& spec) {
  if (spec.argv.empty()) return Status::Error("no command to run");
  // Everything the child needs is built before fork: only system calls run after it.
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<std::string> targets;
  for (const auto& b : spec.binds) targets.push_back(b.second);
  // Resolve the executable through the container's PATH here, before fork.
  std::string path = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
  for (const auto& e : spec.env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  std::string exe = spec.argv[0];
  if (exe.find('/') == std::string::npos) {
    size_t start = 0;
    while (start <= path.size()) {
      size_t colon = path.find(':', start);
      std::string dir =
          path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      std::string candidate = (dir.empty() ? "." : dir) + "/" + exe;
      if (access(candidate.c_str(), X_OK) == 0) {
        exe = candidate;
        break;
      }
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }

  pid_t pid = fork();
  if (pid < 0) return Status::Error(std::string("fork: ") + strerror(errno));
  if (pid > 0) {
    setpgid(pid, pid);  // also in the child: whichever runs first
    return pid;
  }
  // Child.
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int in = open("/dev/null", O_RDONLY);
  if (in >= 0) dup2(in, 0);
  int log = open(spec.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log >= 0) {
    dup2(log, 1);
    dup2(log, 2);
  }
  if (spec.mount_namespace) {
    if (unshare(CLONE_NEWNS) != 0) Fail("unshare(CLONE_NEWNS)");
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) Fail("mount / private");
    if (!spec.hosts_file.empty() &&
        mount(spec.hosts_file.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) {
      Fail("bind-mounting /etc/hosts");
    }
    for (size_t i = 0; i < spec.binds.size(); ++i) {
      MakeDirs(targets[i].data());
      if (mount(spec.binds[i].first.c_str(), targets[i].c_str(), nullptr, MS_BIND | MS_REC,
                nullptr) != 0) {
        Fail(targets[i].c_str());
      }
    }
  }
  if (!spec.working_dir.empty() && chdir(spec.working_dir.c_str()) != 0) Fail("chdir");
  execve(exe.c_str(), argv.data(), envp.data());
  Fail(argv[0]);
}

bool PollExit(pid_t pid, ExitInfo* info) {
  int status = 0;
  pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == 0) return false;
  if (r < 0) {  // not our child any more (should not happen): report it as gone
    info->exited = true;
    info->code = 255;
    return true;
  }
  info->exited = true;
  if (WIFEXITED(status)) {
    info->code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    info->signal = WTERMSIG(status);
    info->code = 128 + info->signal;
  }
  return true;
}

void SignalGroup(pid_t pid, int sig) {
  if (pid > 0) kill(-pid, sig);
}

}  // namespace tj::localnode
