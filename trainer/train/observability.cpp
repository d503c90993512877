#include "trainer/train/observability.h"

#include "trainer/cluster/config/tf_config.h"
#include "trainer/observe/status_server.h"
#include "trainer/observe/tensorboard_writer.h"

namespace tj::train {

struct Observability::Impl {
  std::unique_ptr<observe::StatusServer> server;
  std::unique_ptr<observe::ScalarWriter> scalars;
  EventLog* log = nullptr;
};

StatusOr<std::unique_ptr<Observability>> Observability::Start(const Options& options,
                                                              const std::string& role,
                                                              bool writes_summaries,
                                                              Progress* progress, EventLog* log) {
  auto o = std::unique_ptr<Observability>(new Observability());
  o->impl_ = std::make_unique<Impl>();
  o->impl_->log = log;
  if (options.status_port > 0) {
    const std::string listen = cluster::PodListenAddress();
    o->impl_->server = std::make_unique<observe::StatusServer>(
        options.status_port, [progress] { return progress->StatusJson(); },
        [progress] { return progress->PrometheusText(); }, listen.empty() ? "0.0.0.0" : listen);
    TJ_RETURN_IF_ERROR(o->impl_->server->Start().WithContext("--status-port"));
  }
  if (!options.log_dir.empty() && writes_summaries) {
    const std::string dir = options.log_dir + (role == "evaluator" ? "/eval" : "/train");
    auto writer = observe::ScalarWriter::Open(dir);
    if (!writer.ok()) return writer.status().WithContext("--log-dir");
    o->impl_->scalars = std::move(*writer);
  }
  return o;
}

Observability::~Observability() = default;

ScalarSink Observability::Scalars() {
  observe::ScalarWriter* writer = impl_->scalars.get();
  if (writer == nullptr) return {};
  EventLog* log = impl_->log;
  return [writer, log](std::string_view tag, int64_t step, float value) {
    Status s = writer->WriteScalar(std::string(tag), step, value);
    if (s.ok()) s = writer->Flush();
    // TensorBoard files are a view of the run, not its result: a failed write is a warning.
    if (!s.ok()) log->Warn("TensorBoard: " + s.message());
  };
}

}  // namespace tj::train
