// The process_* metrics every Prometheus client library exports, read from procfs as
// client_golang's process collector reads them: process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
// process_max_fds, process_start_time_seconds. A value procfs does not give is left out.
#pragma once

#include <string>

#include "common/prometheus_text.h"

namespace tj {

// `proc` is procfs' mount point ("/proc"); `pid` "self" or a number. Tests pass a directory
// laid out like procfs.
void RenderProcessMetrics(PrometheusText* out, const std::string& proc = "/proc",
                          const std::string& pid = "self");

}  // namespace tj
