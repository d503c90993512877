// tj-operator: flags and wiring. Informers on TrainingJobs and the pods and services
// they own (never Secrets: it only creates them) feed a rate-limited work queue; --workers threads
// sync keys through the executor (operator/controller/executor.h), only while this instance leads
// when --leader-elect.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <stop_token>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/termination_signals.h"
#include "common/version.h"
#include "operator/api/tfjob_convert.h"
#include "operator/api/training_job.h"
#include "operator/api/yaml_json.h"
#include "operator/controller/cache_transforms.h"
#include "operator/controller/executor.h"
#include "operator/controller/http_endpoints.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/metrics.h"
#include "operator/kube/config.h"
#include "operator/kube/curl_transport.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/informer.h"
#include "operator/kube/leader_election.h"
#include "operator/kube/request_metrics.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/work_queue.h"

namespace {

using nlohmann::json;

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xff;
    s += kHex[v >> 4];
    s += kHex[v & 15];
  }
  return s;
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "tj-operator";
  return buf;
}

// tj-operator convert -f FILE: TFJob manifests (kubeflow.org/v1) as TrainingJobs on stdout
// (one object, or a v1 List of several, for kubectl apply -f -); other documents pass
// through unchanged. What changed or was dropped goes to stderr. Exit 0, or 1 with the reason.
int Convert(const std::string& file) {
  std::stringstream text;
  if (file == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(file);
    if (!in) {
      std::cerr << "tj-operator convert: cannot read " << file << "\n";
      return 1;
    }
    text << in.rdbuf();
  }
  auto docs = tj::api::ParseManifests(text.str());
  if (!docs.ok()) {
    std::cerr << "tj-operator convert: " << file << ": " << docs.status().message() << "\n";
    return 1;
  }
  json items = json::array();
  int converted = 0;
  for (const json& doc : *docs) {
    if (!doc.is_object() || doc.value("kind", "") != "TFJob") {
      items.push_back(doc);
      continue;
    }
    const std::string name = doc.value("metadata", json::object()).value("name", "?");
    auto c = tj::api::ConvertTfJob(doc);
    if (!c.ok()) {
      std::cerr << "tj-operator convert: TFJob " << name << ": " << c.status().message() << "\n";
      return 1;
    }
    for (const std::string& note : c->notes) {
      std::cerr << "tj-operator convert: TFJob " << name << ": " << note << "\n";
    }
    items.push_back(std::move(c->training_job));
    ++converted;
  }
  if (converted == 0) {
    std::cerr << "tj-operator convert: " << file << " holds no TFJob (kind: TFJob)\n";
    return 1;
  }
  const json out =
      items.size() == 1 ? items[0] : json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", items}};
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace

// The operator is linked with jemalloc (operator/CMakeLists.txt), which reads its settings
// from this symbol. The operator's work is JSON: watch events parsed into trees of small
// objects and requests serialized from them, on 16 workers and their concurrent creates. With
// glibc's malloc a third of the operator's CPU under the load test (tests/load) went to
// malloc, free and malloc_consolidate; with jemalloc it creates the same 1,200 objects with
// about a third less CPU, CPU the API server on the same machine gets instead. Two arenas
// (not four per core) and dirty pages returned after a second keep the resident set small.
extern "C" {
extern const char* malloc_conf;
const char* malloc_conf = "narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0";
}

int main(int argc, char** argv) {
  // SIGTERM/SIGINT stop the operator. First thing: every thread started later (the HTTP
  // client's pool among them) inherits the blocked mask, so no thread dies of the signal.
  std::stop_source stop = tj::StopOnTerminationSignals();
  // Without jemalloc (see malloc_conf above): two glibc arenas instead of one per thread (up
  // to 8 per core), which would each keep their own mostly empty heap.
  mallopt(M_ARENA_MAX, 2);
  std::string kubeconfig, ns, metrics_addr = ":8080", probe_addr = ":8081";
  std::string lease_ns, lease_name = "tj-operator-leader";
  bool leader_elect = false;
  // Reconciles wait on the API server far more than they compute: 16 keep a burst of new
  // jobs moving (each pass is a few round trips) at little memory.
  int workers = 16;
  // Client-side limits high enough that a burst of ~100 new jobs (about 10 requests each) is
  // not throttled: the load test (tests/load/) holds the operator to 80% of the API server's
  // own creation rate. The API server's priority and fairness still protects it.
  double qps = 500;
  int burst = 1000;
  std::string log_format = "json";
  int evaluator_grace_s = 300, progress_poll_s = 5, backoff_base_ms = 1000;
  CLI::App app{"tj-operator: runs TrainingJobs (tjo.dev/v1alpha1) on Kubernetes"};
  app.add_option("--kubeconfig", kubeconfig,
                 "kubeconfig file (else $KUBECONFIG, ~/.kube/config, in-cluster)");
  app.add_option("--namespace", ns, "watch only this namespace (default: all)");
  app.add_flag("--leader-elect", leader_elect, "elect a leader on a Lease; only the leader acts");
  app.add_option("--leader-election-namespace", lease_ns,
                 "namespace of the Lease (default: --namespace, else default)");
  app.add_option("--leader-election-id", lease_name, "name of the Lease")->capture_default_str();
  app.add_option("--metrics-bind-address", metrics_addr, "/metrics address; 0 disables")
      ->capture_default_str();
  app.add_option("--health-probe-bind-address", probe_addr,
                 "/healthz and /readyz address; 0 disables")
      ->capture_default_str();
  app.add_option("--workers", workers, "concurrent reconciles")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--kube-api-qps", qps, "client-side QPS limit to the API server; 0: none")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--kube-api-burst", burst, "client-side burst (requests at once)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--evaluator-grace-seconds", evaluator_grace_s,
                 "how long a finished job waits for the evaluator's final evaluation")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400));
  app.add_option("--progress-poll-seconds", progress_poll_s,
                 "how often a running job's trainer /status is read")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  app.add_option("--restart-backoff-ms", backoff_base_ms,
                 "first gang-restart backoff; doubles per restart, at most 60 s")
      ->capture_default_str()
      ->check(CLI::Range(0, 600000));
  app.add_option("--log-format", log_format,
                 "json (one object per line: ts, level, then the fields) or text (for people)")
      ->capture_default_str()
      ->check(CLI::IsMember({"json", "text"}));
  app.set_version_flag("--version", std::string("tj-operator ") + tj::kVersionText);
  std::string convert_file;
  CLI::App* convert =
      app.add_subcommand("convert",
                         "print Kubeflow TFJob manifests (kubeflow.org/v1) as TrainingJobs, for "
                         "kubectl apply -f - (docs/tfjob.md)");
  convert->add_option("-f,--filename", convert_file, "the manifest (YAML or JSON; - for stdin)")
      ->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (*convert) return Convert(convert_file);

  // Every line with its time and level (common/event_log.h), as Kubernetes components log.
  tj::EventLog log(log_format == "text" ? tj::LogFormat::kText : tj::LogFormat::kJson, stdout,
                   stderr, tj::LogStyle::kStructured);
  // TJ_LOG_LEVEL (the chart's logLevel): debug, info (default), warn or error.
  {
    const char* level_text = std::getenv("TJ_LOG_LEVEL");
    tj::LogLevel level = tj::LogLevel::kInfo;
    std::string error;
    if (!tj::ParseLogLevel(level_text != nullptr ? level_text : "", &level, &error)) {
      log.Error("TJ_LOG_LEVEL: " + error);
      return 2;
    }
    log.SetLevel(level);
  }
  auto config = tj::kube::LoadConfig(kubeconfig, tj::kube::ProcessEnvironment());
  if (!config.ok()) {
    log.Error(config.status().message());
    return 1;
  }
  config->qps = qps;
  config->burst = burst;
  config->user_agent = "tj-operator";
  tj::RealClock* clock = tj::RealClock::Get();
  // Every request to the API server is counted (rest_client_* on /metrics).
  tj::kube::RequestMetrics request_metrics(tj::kube::RequestMetrics::HostOf(config->server));
  auto api_transport = tj::kube::NewCurlTransport(*config);
  if (!api_transport.ok()) {
    log.Error("API server " + config->server + ": " + api_transport.status().message());
    return 1;
  }
  auto client_owner = std::make_unique<tj::kube::RestClient>(
      *config,
      std::make_unique<tj::kube::MeteredTransport>(std::move(api_transport).value(),
                                                   &request_metrics, clock),
      clock);
  tj::kube::RestClient* client = client_owner.get();
  // Pod logs (the evaluator's final evaluation) through a transport of their own: at most
  // 64 KiB each (limitBytes, below) within 5 s, so a slow log read holds a reconcile briefly.
  tj::kube::RestConfig log_config = *config;
  log_config.timeout = std::chrono::seconds(5);
  auto log_transport = tj::kube::NewCurlTransport(log_config);
  if (!log_transport.ok()) {
    log.Error(log_transport.status().message());
    return 1;
  }

  const std::string identity = Hostname() + "_" + RandomHex(8);
  tj::kube::EventRecorder recorder(client, "tj-operator", Hostname());
  recorder.set_on_error([&log](const tj::Status& s) { log.Warn(s.message()); });
  tj::controller::OperatorMetrics metrics({tj::kVersion, tj::kGitCommit});
  tj::kube::WorkQueue queue(clock);
  recorder.DeferWhile([&queue] { return queue.Len() + queue.NumProcessing() > 0; },
                      std::chrono::seconds(10));

  tj::controller::ExecutorDeps deps;
  deps.client = client;
  deps.recorder = &recorder;
  deps.metrics = &metrics;
  deps.log = &log;
  deps.random_key = [] { return RandomHex(32); };
  deps.trainer_status = [](const json& pod) -> std::optional<json> {
    if (!pod.contains("status") || !pod["status"].is_object()) return std::nullopt;
    const std::string ip = pod["status"].value("podIP", "");
    auto port = tj::controller::StatusPortOf(pod);
    if (ip.empty() || !port) return std::nullopt;
    return tj::controller::HttpGetJson(ip, *port, "/status", std::chrono::milliseconds(1500));
  };
  tj::kube::HttpTransport* lt = log_transport->get();
  const tj::kube::RestConfig cfg = *config;
  deps.pod_log = [lt, cfg](const std::string& pns,
                           const std::string& pod) -> std::optional<std::string> {
    std::string token = cfg.bearer_token;
    if (!cfg.token_file.empty()) {
      std::ifstream f(cfg.token_file);
      std::stringstream ss;
      ss << f.rdbuf();
      token = ss.str();
      while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
    }
    tj::kube::HttpRequest req;
    req.method = "GET";
    // The log is the tenant's: its last 50 lines, at most 64 KiB of them.
    req.path_and_query =
        "/api/v1/namespaces/" + pns + "/pods/" + pod + "/log?tailLines=50&limitBytes=65536";
    if (!token.empty()) req.authorization = "Bearer " + token;
    auto r = lt->Send(req);
    if (!r.ok() || r->status != 200) return std::nullopt;
    return r->body;
  };
  tj::controller::ReconcilerOptions ropts;
  ropts.evaluator_grace = std::chrono::seconds(evaluator_grace_s);
  ropts.progress_poll = std::chrono::seconds(progress_poll_s);
  ropts.restart_backoff_base = std::chrono::milliseconds(backoff_base_ms);

  // Informers: the jobs, and everything labelled with a job's name (enqueue its job).
  std::vector<std::unique_ptr<tj::kube::Informer>> informers;
  auto enqueue_job = [&queue](const json& obj) { queue.Add(tj::kube::ObjectKey(obj)); };
  auto enqueue_owner = [&queue](const json& obj) {
    const json& m = obj["metadata"];
    if (!m.contains("labels") || !m["labels"].contains(tj::api::kLabelJobName)) return;
    queue.Add(tj::kube::ObjectKey(m.value("namespace", ""),
                                  m["labels"].value(tj::api::kLabelJobName, "")));
  };
  {
    tj::kube::InformerOptions o;
    o.resource = tj::api::kTrainingJobs;
    o.ns = ns;
    o.resync_period = std::chrono::minutes(10);
    o.transform = tj::kube::StripManagedFields;
    auto inf = std::make_unique<tj::kube::Informer>(client, clock, o, &log);
    inf->AddHandlers({enqueue_job,
                      [=](const json& old_obj, const json& n) {
                        if (!tj::controller::OnlyVersionChanged(old_obj, n)) enqueue_job(n);
                      },
                      enqueue_job});
    informers.push_back(std::move(inf));
  }
  // No informer on Secrets: the operator creates the rendezvous Secret and never reads one
  // (the default install cannot read Secrets, reconciler.h says how the key is tracked).
  for (const auto& r : {tj::kube::resources::kPods, tj::kube::resources::kServices}) {
    tj::kube::InformerOptions o;
    o.resource = r;
    o.ns = ns;
    o.label_selector = tj::api::kLabelJobName;
    // Of a pod the reconciler reads a few fields, of the Service its existence.
    o.transform = r.plural == tj::kube::resources::kPods.plural ? tj::controller::TrimPodForCache
                                                                : tj::controller::KeepIdentity;
    auto inf = std::make_unique<tj::kube::Informer>(client, clock, o, &log);
    const bool pods = r.plural == tj::kube::resources::kPods.plural;
    inf->AddHandlers({enqueue_owner,
                      [=](const json& old_obj, const json& n) {
                        // E.g. the scheduler's PodScheduled condition: nothing to do.
                        const bool idle =
                            pods ? tj::controller::OnlyVersionOrConditionsChanged(old_obj, n)
                                 : tj::controller::OnlyVersionChanged(old_obj, n);
                        if (!idle) enqueue_owner(n);
                      },
                      enqueue_owner});
    informers.push_back(std::move(inf));
  }
  deps.caches = tj::controller::OwnedObjectCaches{&informers[0]->cache(), &informers[1]->cache(),
                                                  &informers[2]->cache()};
  deps.clock = clock;
  // Status writes give way to other work (executor.h): the pods of a burst of jobs first.
  deps.defer_status = tj::controller::StatusDeferral{
      [&queue](const std::string& key) { return queue.BusyBesides(key); },
      [&queue](const std::string& key, std::chrono::milliseconds latest) {
        queue.AddWhenIdle(key, latest);
      }};
  tj::controller::Executor executor(deps, ropts);

  std::atomic<bool> leading{!leader_elect};
  std::atomic<bool> synced{false};
  tj::controller::HttpEndpoints metrics_server(
      metrics_addr,
      {{"/metrics", [&] {
          tj::controller::OperatorMetrics::QueueStats q{queue.Len(), queue.adds(), queue.retries(),
                                                        queue.queue_duration(),
                                                        queue.work_duration()};
          return tj::controller::HttpAnswer{200, "text/plain; version=0.0.4; charset=utf-8",
                                            metrics.Render(q, leading.load(), &request_metrics)};
        }}});
  tj::controller::HttpEndpoints probes(
      probe_addr, {{"/healthz",
                    [] {
                      return tj::controller::HttpAnswer{200, "text/plain", "ok\n"};
                    }},
                   {"/readyz", [&] {
                      return synced.load() ? tj::controller::HttpAnswer{200, "text/plain", "ok\n"}
                                           : tj::controller::HttpAnswer{
                                                 503, "text/plain", "informers not synced yet\n"};
                    }}});
  for (auto* s : {&metrics_server, &probes}) {
    tj::Status st = s->Start();
    if (!st.ok()) {
      log.Error(st.message());
      return 1;
    }
  }

  for (auto& inf : informers) inf->Start();
  for (auto& inf : informers) {
    while (!inf->WaitForSync(std::chrono::seconds(1))) {
      if (stop.stop_requested()) return 0;
    }
  }
  synced = true;
  log.Emit({{"event", "operator_started"},
            {"identity", identity},
            {"namespace", ns.empty() ? "(all)" : ns},
            {"workers", workers},
            {"leader_elect", leader_elect}});

  std::jthread elector_thread;
  std::unique_ptr<tj::kube::RestClient> lease_client_holder;
  std::unique_ptr<tj::kube::LeaderElector> elector;
  if (leader_elect) {
    tj::kube::LeaderElectionConfig lc;
    lc.lease_namespace = !lease_ns.empty() ? lease_ns : (!ns.empty() ? ns : "default");
    lc.lease_name = lease_name;
    lc.identity = identity;
    tj::kube::LeaderCallbacks cb;
    cb.on_started_leading = [&] {
      log.Emit({{"event", "leading"}, {"identity", identity}});
      leading = true;
      // Look at every job once now that this instance acts.
      for (const auto& key : informers[0]->cache().Keys()) queue.Add(key);
    };
    cb.on_stopped_leading = [&, lease = lc.lease_name] {
      leading = false;
      if (stop.stop_requested()) {
        log.Emit({{"event", "released_lease"}, {"lease", lease}});
        return;
      }
      // Past the renew deadline another instance may lead soon: no call of this one may
      // still reach the API server, whatever a reconcile is waiting for. Exit now, as
      // client-go's leaders do; a fresh start campaigns again.
      log.Error("lost the leader lease " + lease +
                ": not renewed within the renew deadline; "
                "exiting so a fresh start campaigns");
      std::_Exit(1);
    };
    // The lease's own client (LeaseClientConfig): renewals never queue behind reconciles.
    auto lease_client = tj::kube::RestClient::New(tj::kube::LeaseClientConfig(*config, lc), clock);
    if (!lease_client.ok()) {
      log.Error(lease_client.status().message());
      return 1;
    }
    lease_client_holder = std::move(*lease_client);
    elector =
        std::make_unique<tj::kube::LeaderElector>(lease_client_holder.get(), clock, lc, cb, &log);
    tj::Status v = elector->Validate();
    if (!v.ok()) {
      log.Error(v.message());
      return 2;
    }
    elector_thread = std::jthread([&](const std::stop_token&) {
      tj::Status s = elector->Run(stop.get_token());
      if (!s.ok()) log.Error(s.message());
      stop.request_stop();
    });
  }

  std::vector<std::jthread> threads;
  threads.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&] {
      while (true) {
        auto key = queue.Get();
        if (!key) return;
        if (!leading.load()) {
          queue.Done(*key);
          queue.AddAfter(*key, std::chrono::seconds(1));
          continue;
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto r = executor.Sync(*key);
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!r.ok()) {
          log.Warn("reconciling " + *key + ": " + r.status().message());
          metrics.ReconcileDone("error", secs);
          queue.Done(*key);
          queue.AddRateLimited(*key);
          continue;
        }
        queue.Forget(*key);
        queue.Done(*key);
        if (*r) {
          metrics.ReconcileDone("requeue_after", secs);
          queue.AddAfter(*key, **r);
        } else {
          metrics.ReconcileDone("success", secs);
        }
      }
    });
  }

  while (!stop.stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  log.Emit({{"event", "operator_stopping"}});
  queue.ShutDown();
  threads.clear();
  // Still the leader here (the lease is released below): no status kept back is lost.
  if (leading.load()) {
    if (int n = executor.WriteKeptStatuses(); n > 0) {
      log.Emit({{"event", "wrote_kept_statuses"}, {"count", n}});
    }
  }
  if (elector_thread.joinable()) elector_thread.join();
  for (auto& inf : informers) inf->Stop();
  metrics_server.Stop();
  probes.Stop();
  return 0;
}
