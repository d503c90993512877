// Test support: a child process with its own environment, stdout and stderr captured to
// files, that can be waited for with a deadline, signalled, and read line by line while it
// runs. Header-only; for tests that exercise real executables (tj-trainer, tj-operator).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"

namespace tj::testing {

class Subprocess {
 public:
  // Starts `argv` with the parent's environment plus `env` (an empty value unsets the
  // variable). Output goes to `<log_prefix>.out` and `<log_prefix>.err`.
  Subprocess(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
             const std::string& log_prefix)
      : out_path_(log_prefix + ".out"), err_path_(log_prefix + ".err") {
    pid_ = ::fork();
    if (pid_ == 0) {
      // Dies with the test (a ctest timeout kills the test binary, whose destructors never
      // run): no operator or trainer is left behind. Subprocesses are started from the
      // test's main thread, whose end this follows.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      for (const auto& [k, v] : env) {
        if (v.empty()) {
          ::unsetenv(k.c_str());
        } else {
          ::setenv(k.c_str(), v.c_str(), 1);
        }
      }
      std::vector<char*> args;
      args.reserve(argv.size());
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~Subprocess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() {
    if (exit_code_) return false;
    Poll();
    return !exit_code_;
  }
  void Signal(int sig) { ::kill(pid_, sig); }

  // The exit code (128 + signal for a signalled child), or nullopt if still running at the
  // deadline.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exit_code_ && std::chrono::steady_clock::now() < deadline) {
      Poll();
      if (!exit_code_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_code_;
  }

  std::string Stdout() const { return ReadBytes(out_path_); }
  std::string Stderr() const { return ReadBytes(err_path_); }
  std::vector<std::string> StdoutLines() const {
    std::vector<std::string> lines;
    std::istringstream in(Stdout());
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }
  // Waits until a complete stdout line contains `needle`; false at the deadline or if the
  // process ended first.
  bool WaitForLine(const std::string& needle, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      for (const std::string& l : StdoutLines()) {
        if (l.find(needle) != std::string::npos) return true;
      }
      if (!running()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

 private:
  void Poll() {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }

  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// A TCP socket listening on `address` (INADDR_LOOPBACK, INADDR_ANY; host byte order) at a
// port the kernel picks, written to *port. -1 when it could not.
inline int ListenOnFreePort(uint32_t address, int* port, int backlog = 16) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(address);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, backlog) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// A TCP port that was free a moment ago, for a process that will listen on it later: drawn
// at random below the kernel's ephemeral range (32768-60999 by default) and checked by
// listening on it once. A port the kernel picks (port 0) would be of that range, where every
// outgoing connection of the machine (another test's, a stranger test's flood) takes its
// local port, and could be taken before the process binds it ("Address already in use").
// A port is handed out once per process: the check closes its socket at once, so without
// that two calls before either process binds could draw the same port (a chief and a worker
// given one host:port, which the trainer refuses).
inline int FreePort() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  static std::mutex handed_out_mutex;
  static std::set<int> handed_out;
  std::uniform_int_distribution<int> draw(20000, 32767);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = draw(rng);
    {
      std::lock_guard<std::mutex> lock(handed_out_mutex);
      if (!handed_out.insert(port).second) continue;
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free =
        ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd, 1) == 0;
    ::close(fd);
    if (free) return port;
  }
  return 0;
}

}  // namespace tj::testing
