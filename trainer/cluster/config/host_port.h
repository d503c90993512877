// Addresses as TF_CONFIG and the trainer's published ports write them: "host:port", with an
// IPv6 host in brackets ("[fd00::5]:2222").
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace tj::cluster {

// A "host:port" (or "[v6addr]:port") address split into its parts.
struct HostPort {
  std::string host;
  int port = 0;
};

// Splits and checks "host:port"; the error names `what` (e.g. "TF_CONFIG.cluster.worker[1]").
StatusOr<HostPort> ParseHostPort(std::string_view address, std::string_view what);

// "host:port", the host in brackets when it is an IPv6 address: what ParseHostPort reads.
std::string FormatHostPort(std::string_view host, int port);

}  // namespace tj::cluster
