// The CRC-32C of TFRecord framing, for the event files: common/crc32c.h, under the names this
// module has always used.
#pragma once

#include "common/crc32c.h"

namespace tj::observe {

using ::tj::Crc32c;
using ::tj::MaskCrc;

}  // namespace tj::observe
