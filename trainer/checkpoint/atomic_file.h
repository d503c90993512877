// Durable, atomic replacement of a file: the bytes go to a temporary file in the same
// directory, which is fsynced, renamed over the target, and the directory fsynced. A reader
// sees either the old file or the new one, never a mix, even across a crash or power loss.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace tj::checkpoint {

// Writes `bytes` to `path` atomically and durably. The directory must exist. On failure the
// temporary file is removed and `path` is left as it was. Thread-safe for distinct paths.
// `before_rename_failpoint`, when given, is hit (common/failpoint.h) once the temporary file
// is complete and closed, just before the rename: where fault tests kill a writer.
Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                           std::string_view before_rename_failpoint = {});

// True for the names WriteFileAtomically uses for its temporary files (".<name>.tmp.XXXXXX").
// Such a file left in a directory is debris of a writer that crashed mid-write.
bool IsTempFileName(std::string_view file_name);

// Removes the temporary files (IsTempFileName) directly inside `dir`. Only the directory's one
// writer should call it, since another writer's temporary file may be in flight.
// A missing directory is not an error.
Status RemoveTempFiles(const std::string& dir);

}  // namespace tj::checkpoint
