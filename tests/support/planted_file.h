// Files planted on a shared volume, for tests of what reads them: a FIFO, and a deadline on a
// call that could wait on one, so that a test of a reader that blocks fails instead of hanging.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

namespace tj::testing {

// Makes a FIFO at `path`.
inline void PlantFifo(const std::string& path) {
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << "mkfifo " << path;
}

// Runs `call` on a thread; true when it returns within `deadline`. When it does not (it waits
// on one of `fifos`), each FIFO is opened for writing and closed again until the call returns
// (its reader then sees an empty file), so that the test fails rather than hangs.
template <typename Call>
bool ReturnsWithin(std::chrono::milliseconds deadline, const std::vector<std::string>& fifos,
                   Call call) {
  std::future<void> done = std::async(std::launch::async, call);
  if (done.wait_for(deadline) == std::future_status::ready) {
    done.get();
    return true;
  }
  while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    for (const std::string& fifo : fifos) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) ::close(fd);
    }
  }
  done.get();
  return false;
}

}  // namespace tj::testing
