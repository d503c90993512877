#include "processnode/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tj::processnode {
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
  WriteAll(2, "tj-process-node: ");
  WriteAll(2, what);
  WriteAll(2, ": ");
  WriteAll(2, err);
  WriteAll(2, "\n");
  _exit(127);
}

// The supervisor's container, for its signal handler (the supervisor is a single-threaded
// forked process; nothing else reads or writes this).
volatile sig_atomic_t g_supervised_container = 0;

void ForwardSignal(int sig) {
  if (g_supervised_container > 0) kill(g_supervised_container, sig);
}

constexpr int kForwardedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// Decimal digits of `v` into `out` (async-signal-safe); returns the length.
size_t FormatInt(int v, char* out) {
  char tmp[16];
  size_t n = 0;
  unsigned u = v < 0 ? static_cast<unsigned>(-v) : static_cast<unsigned>(v);
  do {
    tmp[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0 && n < sizeof(tmp));
  size_t len = 0;
  if (v < 0) out[len++] = '-';
  while (n > 0) out[len++] = tmp[--n];
  return len;
}

// Closes every descriptor above stderr: the supervisor outlives the agent and must not hold
// its sockets (the log endpoint's port) or files.
void CloseInheritedDescriptors() {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
#endif
  struct rlimit rl;
  long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? static_cast<long>(rl.rlim_cur) : 1024;
  if (max > 65536 || max < 0) max = 65536;
  for (int fd = 3; fd < max; ++fd) close(fd);
}

// The supervisor's part after fork (async-signal-safe calls only): starts the container as
// its child, forwards signals to it, records its outcome in `exit_file` and exits with it.
[[noreturn]] void Supervise(const char* exe, char* const argv[], char* const envp[],
                            const char* working_dir, const char* exit_file, const char* exit_tmp) {
  CloseInheritedDescriptors();
  sigset_t forwarded, none;
  sigemptyset(&forwarded);
  sigemptyset(&none);
  for (int sig : kForwardedSignals) sigaddset(&forwarded, sig);
  // Blocked until the handlers are in place, so a SIGTERM right after the start is
  // forwarded rather than killing the supervisor alone.
  sigprocmask(SIG_BLOCK, &forwarded, nullptr);
  pid_t c = fork();
  if (c < 0) Fail("fork (container under its supervisor)");
  if (c == 0) {
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (*working_dir != '\0' && chdir(working_dir) != 0) Fail("chdir");
    execve(exe, argv, envp);
    Fail(argv[0]);
  }
  g_supervised_container = c;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kForwardedSignals) sigaction(sig, &sa, nullptr);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int status = 0;
  while (waitpid(c, &status, 0) < 0 && errno == EINTR) {
  }
  int code = 255, sig = 0;
  if (WIFEXITED(status)) {
    code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    sig = WTERMSIG(status);
    code = 128 + sig;
  }
  char line[40];
  size_t n = FormatInt(code, line);
  line[n++] = ' ';
  n += FormatInt(sig, line + n);
  line[n++] = '\n';
  int fd = open(exit_tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    if (write(fd, line, n) == static_cast<ssize_t>(n)) fsync(fd);
    close(fd);
    rename(exit_tmp, exit_file);
  }
  _exit(code);
}

// (state, start time) from /proc/<pid>/stat; state '\0' when there is no such process.
std::pair<char, unsigned long long> ProcStat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return {'\0', 0};
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  char state = '\0';
  unsigned long long start = 0;
  // After the command: field 3 (state) is index 0, field 22 (starttime) index 19.
  for (int i = 0; i <= 19 && rest >> field; ++i) {
    if (i == 0) state = field.empty() ? '\0' : field[0];
    if (i == 19) start = std::strtoull(field.c_str(), nullptr, 10);
  }
  return {state, start};
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

  const std::string exit_tmp = spec.exit_file.empty() ? "" : spec.exit_file + ".tmp";
  if (!spec.exit_file.empty()) unlink(spec.exit_file.c_str());  // a previous run's outcome

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
  if (!spec.exit_file.empty()) {
    Supervise(exe.c_str(), argv.data(), envp.data(), spec.working_dir.c_str(),
              spec.exit_file.c_str(), exit_tmp.c_str());
  }
  if (!spec.working_dir.empty() && chdir(spec.working_dir.c_str()) != 0) Fail("chdir");
  execve(exe.c_str(), argv.data(), envp.data());
  Fail(argv[0]);
}

unsigned long long ProcessStartTime(pid_t pid) { return pid > 0 ? ProcStat(pid).second : 0; }

bool PollSupervised(pid_t pid, unsigned long long start_time, const std::string& exit_file,
                    ExitInfo* info, bool* lost) {
  *lost = false;
  int status = 0;
  pid_t r = pid > 0 ? waitpid(pid, &status, WNOHANG) : -1;
  if (r == 0) return false;  // our child, running
  if (r < 0) {               // not our child (adopted): the same process, not a zombie?
    auto [state, start] = ProcStat(pid);
    if (state != '\0' && state != 'Z' && start == start_time && start_time != 0) return false;
  }
  *info = ExitInfo{};
  info->exited = true;
  std::ifstream in(exit_file);
  int code = 0, sig = 0;
  if (in >> code >> sig) {
    info->code = code;
    info->signal = sig;
    return true;
  }
  if (r == pid && WIFSIGNALED(status)) {  // the supervisor itself was killed
    info->signal = WTERMSIG(status);
    info->code = 128 + info->signal;
    return true;
  }
  *lost = true;
  info->code = 137;
  return true;
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

}  // namespace tj::processnode
