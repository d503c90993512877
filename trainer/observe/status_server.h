// The trainer's HTTP endpoint, read by the operator to fill a TrainingJob's status:
//   GET /status   -> 200, application/json: whatever `status()` returns
//   GET /metrics  -> 200, Prometheus text format 0.0.4: whatever `metrics()` returns
//   other paths   -> 404; other methods on these paths -> 405 (common/http_server.h).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/http_server.h"
#include "common/status.h"

namespace tj::observe {

class StatusServer {
 public:
  using StatusFn = std::function<nlohmann::json()>;
  using MetricsFn = std::function<std::string()>;

  // `port` 0 disables the server (Start() then does nothing). The callbacks run on the
  // listener's threads, possibly concurrently: they must be thread-safe. An exception thrown
  // by one becomes a 500 answer, never a crash.
  StatusServer(int port, StatusFn status, MetricsFn metrics, std::string bind_address = "0.0.0.0");

  // Starts listening. Errors name the port: "status server: cannot listen on port 8080 ...".
  Status Start();
  // Stops listening and waits for handlers in flight; idempotent.
  void Stop() { server_.Stop(); }

  bool running() const { return server_.running(); }
  int port() const { return port_; }

 private:
  int port_;
  HttpServer server_;
};

}  // namespace tj::observe
