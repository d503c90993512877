#include "trainer/train/termination_message.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/status_schema.h"

namespace tj::train {

std::string TerminationMessagePath() {
  const char* v = std::getenv("TJ_TERMINATION_MESSAGE_PATH");
  return v != nullptr && *v != '\0' ? v : "/dev/termination-log";
}

Status WriteTerminationMessage(const std::optional<nlohmann::json>& last_backup,
                               const std::string& path) {
  if (!last_backup || !last_backup->is_object()) return Status::Ok();
  nlohmann::json backup = nlohmann::json::object();
  for (const char* key : {status_schema::kEpoch.key, status_schema::kStep.key,
                          status_schema::kGlobalStep.key, "time"}) {
    if (auto it = last_backup->find(key); it != last_backup->end()) backup[key] = *it;
  }
  const std::string text = nlohmann::json{{"lastBackup", backup}}.dump() + "\n";
  // Never created, never followed, never waited on (a FIFO planted there).
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::Ok();  // not in a pod (or no message wanted)
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Ok();
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      return Status::Error("writing the termination message to " + path + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return Status::Ok();
}

}  // namespace tj::train
