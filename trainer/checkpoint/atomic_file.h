// Durable, atomic replacement of a file: the bytes go to a temporary file in the same
// directory, which is fsynced, renamed over the target, and the directory fsynced. A reader
// sees either the old file or the new one, never a mix, even across a crash or power loss.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tj::checkpoint {

// Writes `bytes` to `path` atomically and durably. The directory must exist. On failure the
// temporary file is removed and `path` is left as it was. Thread-safe for distinct paths.
// `before_rename_failpoint`, when given, is hit (common/failpoint.h) once the temporary file
// is complete and closed, just before the rename: where fault tests kill a writer.
// `writer` (letters, digits, '-'), when given, is part of the temporary file's name
// (".<name>.tmp.<writer>.XXXXXX"), so that a writer can clean up its own debris only.
// Out of space (ENOSPC, EDQUOT, EFBIG) is StatusCode::kResourceExhausted.
Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                           std::string_view before_rename_failpoint = {},
                           std::string_view writer = {});

// True for the names WriteFileAtomically uses for its temporary files (".<name>.tmp.XXXXXX").
// Such a file left in a directory is debris of a writer that crashed mid-write.
bool IsTempFileName(std::string_view file_name);
// The writer part of such a name (".<name>.tmp.<writer>.XXXXXX"), empty when it has none.
std::string_view TempFileWriter(std::string_view file_name);

// Removes the temporary files (IsTempFileName) directly inside `dir` whose writer `remove`
// accepts (every one when `remove` is null): a writer removes only its own debris, never a
// temporary file another writer may have in flight. A missing directory is not an error.
Status RemoveTempFiles(const std::string& dir,
                       const std::function<bool(std::string_view writer)>& remove = nullptr);

}  // namespace tj::checkpoint
