// HttpTransport on cpprestsdk (Boost.Asio + OpenSSL): TLS with the configured CA, client
// certificate and key, or no verification when the configuration says so. Thread-safe.
#pragma once

#include <memory>

#include "common/status.h"
#include "operator/kube/config.h"
#include "operator/kube/http_transport.h"

namespace tj::kube {

// Fails when the configuration's PEM data is unusable (the message names which).
StatusOr<std::unique_ptr<HttpTransport>> NewCppRestTransport(const RestConfig& config);

}  // namespace tj::kube
