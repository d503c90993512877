#include "trainer/observe/status_server.h"

#include <utility>

namespace tj::observe {

StatusServer::StatusServer(int port, StatusFn status, MetricsFn metrics, std::string bind_address)
    : port_(port),
      server_(std::move(bind_address), port,
              {{"/status",
                [status = std::move(status)] {
                  return HttpAnswer{200, "application/json", status ? status().dump() : "{}"};
                }},
               {"/metrics", [metrics = std::move(metrics)] {
                  return HttpAnswer{200, kPrometheusContentType, metrics ? metrics() : ""};
                }}}) {}

Status StatusServer::Start() {
  Status s = server_.Start();
  if (s.ok()) return s;
  return Status::Error("status server: " + s.message() + "; choose another --status-port");
}

}  // namespace tj::observe
