// HttpTransport on libcurl (OpenSSL): HTTP/1.1 with keep-alive, TLS with the configured CA,
// client certificate and key, or no verification when the configuration says so.
// Thread-safe.
//
// Why libcurl: a request runs on the calling thread from start to end (a pool of easy handles,
// each keeping its connection alive), so an exchange costs no thread hand-offs. The operator's
// 16 workers under the load test (tests/load) spent most of their CPU in cpprestsdk's task
// continuations and futex wake-ups between its threads, CPU taken from the API server on the
// same machine (docs/reliability.md, "Load").
#pragma once

#include <memory>

#include "common/status.h"
#include "kube/config.h"
#include "kube/http_transport.h"

namespace tj::kube {

// Fails when the configuration's PEM data is unusable (the message names which) or it names
// no server.
StatusOr<std::unique_ptr<HttpTransport>> NewCurlTransport(const RestConfig& config);

}  // namespace tj::kube
