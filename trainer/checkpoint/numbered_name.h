// The names of numbered files in a directory: "<prefix><n>", n a non-negative decimal number,
// as in "backup-12" (BackupManager) and "ckpt-4" (per-epoch checkpoints). One parser for both,
// so that what counts as one of them (no sign, no suffix, no empty number) is the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tj::checkpoint {

// "<prefix><n>".
std::string NumberedName(std::string_view prefix, int64_t n);

// n of "<prefix><n>"; nullopt for anything else: another prefix, an empty or signed number,
// trailing characters ("ckpt-4.tmp"), a number beyond int64.
std::optional<int64_t> ParseNumberedName(std::string_view name, std::string_view prefix);

}  // namespace tj::checkpoint
