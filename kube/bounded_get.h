// A small HTTP GET of a document a tenant's pod serves (a trainer's /status): plain HTTP, one
// connection, a hard cap on the body's size and on the whole exchange's time, so that an
// endless, slow or huge answer costs the operator at most `max_bytes` of memory and `timeout`.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "common/status.h"

namespace tj::kube {

struct BoundedGetLimits {
  std::chrono::milliseconds timeout{1500};  // connect + request + whole body
  size_t max_bytes = size_t{64} * 1024;     // a longer body is an error, not truncated
};

// GET http://host:port/path (host: a name, an IPv4 or an IPv6 address). The body of a 200 answer;
// an error naming the URL otherwise (refused, timed out, another status, a body over max_bytes).
// Thread-safe.
StatusOr<std::string> BoundedGet(const std::string& host, int port, const std::string& path,
                                 const BoundedGetLimits& limits = {});

}  // namespace tj::kube
