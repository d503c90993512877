// The HTTP seam of the Kubernetes client: one request/response exchange, or a streamed
// response (watches). CurlTransport (curl_transport.h) is the real one; tests of logic
// above it may pass their own.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include "kube/api_error.h"

namespace tj::kube {

struct HttpRequest {
  std::string method;          // GET, POST, PUT, PATCH, DELETE
  std::string path_and_query;  // "/api/v1/pods?limit=500"
  std::string content_type;    // of body; empty when there is none
  std::string body;
  std::string authorization;         // the Authorization header value, or empty
  std::chrono::seconds timeout{30};  // Stream(): no byte for this long ends it (Send() uses
                                     // the configuration's timeout)
};

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lower-cased
};

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;

  // One exchange. A response with any status is a success here; only a failure to get one
  // (connection refused, TLS, timeout) is an error (code 0).
  virtual Result<HttpResponse> Send(const HttpRequest& request) = 0;

  // Streams the body of a 200 answer to `on_data` as bytes arrive, until the server ends it,
  // `on_data` returns false or `stop` is requested (all successes). For another status, the
  // body is collected into the returned response and on_data is not called.
  virtual Result<HttpResponse> Stream(const HttpRequest& request,
                                      const std::function<bool(std::string_view)>& on_data,
                                      std::stop_token stop) = 0;
};

}  // namespace tj::kube
