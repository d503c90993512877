// Reading a file on the shared volume (backups, checkpoints, the fence, the final marker, an
// exported model). Others may write that volume, so a path there may hold a FIFO (whose open
// would block until someone writes it), a directory, a symbolic link, a device or a file of
// any size. ReadVolumeFile never blocks on one and never follows a link: it reads a regular
// file of bounded size, or says what is there instead and what to do.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "common/sha256.h"
#include "common/status.h"

namespace tj::checkpoint {

// The bytes of the regular file at `path`, at most `max_bytes` of them; nullopt when nothing
// is there. Errors name the file and the reason: "not a regular file (a FIFO)", "a symbolic
// link", "too large", or the open or read error. Opens with O_NONBLOCK | O_NOFOLLOW |
// O_CLOEXEC and checks the type with fstat before reading, so nothing planted can make it wait.
// Thread-safe.
StatusOr<std::optional<std::string>> ReadVolumeFile(const std::string& path, size_t max_bytes);

// HMAC-SHA256 under the job's key of bytes kept on the volume; an empty key (a run by hand)
// gives integrity only. An error when the MAC cannot be computed (common/sha256.h).
StatusOr<Digest> VolumeMac(std::string_view key, const void* data, size_t size);

}  // namespace tj::checkpoint
