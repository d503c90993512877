// tj-operator: flags and wiring. Informers on TrainingJobs and the pods, services and (with
// --network-policy) NetworkPolicies they own (never Secrets: it only creates them), and on
// Kueue's objects, PodGroups and Nodes where the operator may list them, feed a
// rate-limited work queue; --workers threads sync keys through the executor
// (operator/controller/executor.h), only while this instance leads when --leader-elect.
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
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/http_server.h"
#include "common/secure_random.h"
#include "common/termination_signals.h"
#include "common/version.h"
#include "kube/config.h"
#include "kube/curl_transport.h"
#include "kube/event_recorder.h"
#include "kube/informer.h"
#include "kube/leader_election.h"
#include "kube/object_meta.h"
#include "kube/request_metrics.h"
#include "kube/rest_client.h"
#include "kube/server_version.h"
#include "kube/work_queue.h"
#include "operator/api/tfjob_convert.h"
#include "operator/api/training_job.h"
#include "operator/api/yaml_json.h"
#include "operator/controller/cache_transforms.h"
#include "operator/controller/executor.h"
#include "operator/controller/gang_scheduling.h"
#include "operator/controller/job_informers.h"
#include "operator/controller/job_resources.h"
#include "operator/controller/metrics.h"
#include "operator/controller/network_policy.h"
#include "operator/controller/reconcile_workers.h"
#include "operator/controller/tenant_reads.h"

namespace {

using nlohmann::json;

// A rendezvous key or a leader identity. Without the kernel's randomness there is no key worth
// the name: an exception, which fails the pass that wanted the key (retried with backoff).
std::string RandomHex(size_t bytes) {
  auto hex = tj::SecureRandomHex(bytes);
  if (!hex.ok()) throw std::runtime_error("cannot make a random key: " + hex.status().message());
  return *hex;
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "tj-operator";
  return buf;
}

// The documents of the manifest `file` ("-": stdin), YAML or JSON; nullopt, said on stderr
// for the subcommand `command`, when it cannot be read or parsed.
std::optional<std::vector<json>> ReadManifests(const std::string& file, const char* command) {
  std::stringstream text;
  if (file == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(file);
    if (!in) {
      std::cerr << "tj-operator " << command << ": cannot read " << file << "\n";
      return std::nullopt;
    }
    text << in.rdbuf();
  }
  auto docs = tj::api::ParseManifests(text.str());
  if (!docs.ok()) {
    std::cerr << "tj-operator " << command << ": " << file << ": " << docs.status().message()
              << "\n";
    return std::nullopt;
  }
  return std::move(*docs);
}

// `items` on stdout, for kubectl apply -f -: the one object, or a v1 List of several.
void PrintObjects(const json& items) {
  const json out =
      items.size() == 1 ? items[0] : json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", items}};
  std::cout << out.dump(2) << "\n";
}

// tj-operator convert -f FILE: TFJob manifests (kubeflow.org/v1) as TrainingJobs on stdout
// (one object, or a v1 List of several, for kubectl apply -f -); other documents pass
// through unchanged. What changed or was dropped goes to stderr. Exit 0, or 1 with the reason.
int Convert(const std::string& file) {
  const std::optional<std::vector<json>> docs = ReadManifests(file, "convert");
  if (!docs) return 1;
  json items = json::array();
  int converted = 0;
  for (const json& doc : *docs) {
    if (tj::kube::TextOf(doc, "kind") != "TFJob") {
      items.push_back(doc);
      continue;
    }
    std::string name = tj::kube::TextOf(tj::kube::MetadataOf(doc), "name");
    if (name.empty()) name = "?";
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
  PrintObjects(items);
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

// The command line. Defaults are the values below.
struct Flags {
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
  int evaluator_grace_s = 300, progress_poll_s = 5, backoff_base_ms = 1000, failure_settle_s = 30;
  int lost_node_force_delete_s = 30;
  int kueue_priority_boost_max = 0;
  int kueue_priority_boost_seconds = 60;
  // auto: gang pods restart in place on Kubernetes 1.36+ (RestartAllContainers) where every
  // node that takes new pods declares the feature; never.
  std::string restart_in_place = "auto";
  std::string convert_file;  // the convert subcommand's file, when it was given
  bool convert = false;
  // A NetworkPolicy per job (operator/controller/network_policy.h), admitting the operator's
  // pods: in this namespace (default: $POD_NAMESPACE) with these labels (the chart's
  // Deployment selector of a release named tj-operator).
  bool network_policy = false;
  std::string network_policy_file;  // the network-policy subcommand's file
  bool print_network_policy = false;
  std::string network_policy_operator_ns;
  std::string network_policy_operator_labels =
      "app.kubernetes.io/name=tj-operator,app.kubernetes.io/instance=tj-operator";
  // Resolved from the three above by ParseFlags, with --network-policy or the subcommand.
  std::optional<tj::controller::NetworkPolicySettings> network_policy_settings;
};

// Where the operator's pods are, for the jobs' NetworkPolicies: the flags, else $POD_NAMESPACE.
tj::StatusOr<tj::controller::NetworkPolicySettings> NetworkPolicySettingsOf(const Flags& f) {
  tj::controller::NetworkPolicySettings np;
  np.operator_namespace = f.network_policy_operator_ns;
  if (np.operator_namespace.empty()) {
    const char* pod_ns = std::getenv("POD_NAMESPACE");
    np.operator_namespace = pod_ns != nullptr ? pod_ns : "";
  }
  if (np.operator_namespace.empty()) {
    return tj::Status::Error(
        "--network-policy: the operator's namespace is unknown; set "
        "--network-policy-operator-namespace or $POD_NAMESPACE");
  }
  auto labels = tj::controller::ParseLabels(f.network_policy_operator_labels);
  if (!labels.ok()) return labels.status().WithContext("--network-policy-operator-labels");
  np.operator_labels = std::move(*labels);
  return np;
}

// Parses the command line into `f`; an exit code when the process should end now (--help,
// --version, a bad flag, --network-policy without the operator's namespace).
std::optional<int> ParseFlags(int argc, char** argv, Flags& f) {
  CLI::App app{"tj-operator: runs TrainingJobs (tjo.dev/v1alpha1) on Kubernetes"};
  app.add_option("--kubeconfig", f.kubeconfig,
                 "kubeconfig file (else $KUBECONFIG, ~/.kube/config, in-cluster)");
  app.add_option("--namespace", f.ns, "watch only this namespace (default: all)");
  app.add_flag("--leader-elect", f.leader_elect, "elect a leader on a Lease; only the leader acts");
  app.add_option("--leader-election-namespace", f.lease_ns,
                 "namespace of the Lease (default: --namespace, else default)");
  app.add_option("--leader-election-id", f.lease_name, "name of the Lease")->capture_default_str();
  app.add_option("--metrics-bind-address", f.metrics_addr, "/metrics address; 0 disables")
      ->capture_default_str();
  app.add_option("--health-probe-bind-address", f.probe_addr,
                 "/healthz and /readyz address; 0 disables")
      ->capture_default_str();
  app.add_option("--workers", f.workers, "concurrent reconciles")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--kube-api-qps", f.qps, "client-side QPS limit to the API server; 0: none")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--kube-api-burst", f.burst, "client-side burst (requests at once)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--evaluator-grace-seconds", f.evaluator_grace_s,
                 "how long a finished job waits for the evaluator's final evaluation")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400));
  app.add_option("--progress-poll-seconds", f.progress_poll_s,
                 "how often a running job's trainer /status is read")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  app.add_option("--failure-settle-seconds", f.failure_settle_s,
                 "how long a gang's failure waits for its other pods to end before it is "
                 "judged (the first failure decides)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  app.add_option("--lost-node-force-delete-seconds", f.lost_node_force_delete_s,
                 "a job's pod still terminating on a node that is not Ready this long after the "
                 "later of its grace period's end and the node's loss is force-deleted "
                 "(gracePeriodSeconds 0), so the next gang can take its name; 0: never")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400));
  app.add_option("--kueue-priority-boost-max", f.kueue_priority_boost_max,
                 "at most this Kueue priority boost (kueue.x-k8s.io/priority-boost) on an "
                 "admitted job's Workload, one per --kueue-priority-boost-seconds of work since "
                 "its last backup; 0: none")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--restart-in-place", f.restart_in_place,
                 "auto: on a Kubernetes 1.36+ API server, a gang made while every ready, "
                 "schedulable node declares RestartAllContainersOnContainerExits (read from the "
                 "nodes: needs list and watch on them) restarts its containers in place, pods "
                 "kept, when its trainer fails as its restartPolicy retries; otherwise, and with "
                 "never, the operator makes the gang's pods again")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "never"}));
  app.add_option("--kueue-priority-boost-seconds", f.kueue_priority_boost_seconds,
                 "seconds of work since a job's last backup that add one to its priority boost")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  app.add_option("--restart-backoff-ms", f.backoff_base_ms,
                 "first gang-restart backoff; doubles per restart, at most 60 s")
      ->capture_default_str()
      ->check(CLI::Range(0, 600000));
  app.add_option("--log-format", f.log_format,
                 "json (one object per line: ts, level, then the fields) or text (for people)")
      ->capture_default_str()
      ->check(CLI::IsMember({"json", "text"}));
  app.add_flag("--network-policy", f.network_policy,
               "give every job a NetworkPolicy that admits to its pods only the job's own pods "
               "and, on the status ports, the operator (needs create, get, list and watch on "
               "networkpolicies)");
  app.add_option("--network-policy-operator-namespace", f.network_policy_operator_ns,
                 "the operator's namespace, admitted to the jobs' status ports (default: "
                 "$POD_NAMESPACE)");
  app.add_option("--network-policy-operator-labels", f.network_policy_operator_labels,
                 "the operator pods' labels, admitted to the jobs' status ports (k=v,k2=v2)")
      ->capture_default_str();
  app.set_version_flag("--version", std::string("tj-operator ") + tj::kVersionText);
  CLI::App* convert =
      app.add_subcommand("convert",
                         "print Kubeflow TFJob manifests (kubeflow.org/v1) as TrainingJobs, for "
                         "kubectl apply -f - (docs/tfjob.md)");
  convert->add_option("-f,--filename", f.convert_file, "the manifest (YAML or JSON; - for stdin)")
      ->required();
  CLI::App* policy = app.add_subcommand(
      "network-policy",
      "print the NetworkPolicy the operator makes for each TrainingJob of a manifest (with "
      "--network-policy; the operator's namespace and labels from the flags above)");
  policy
      ->add_option("-f,--filename", f.network_policy_file,
                   "the manifest (YAML or JSON; - for stdin)")
      ->required();
  policy->fallthrough();  // the operator's namespace and labels may follow the subcommand
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  f.convert = convert->parsed();
  f.print_network_policy = policy->parsed();
  if (f.network_policy || f.print_network_policy) {
    auto np = NetworkPolicySettingsOf(f);
    if (!np.ok()) {
      std::cerr << "tj-operator: " << np.status().message() << "\n";
      return 2;
    }
    f.network_policy_settings = std::move(*np);
  }
  return std::nullopt;
}

// TJ_LOG_LEVEL (the chart's logLevel): debug, info (default), warn or error. False, said in
// the log, when it names no level.
bool ApplyLogLevel(tj::EventLog& log) {
  const char* level_text = std::getenv("TJ_LOG_LEVEL");
  tj::LogLevel level = tj::LogLevel::kInfo;
  std::string error;
  if (!tj::ParseLogLevel(level_text != nullptr ? level_text : "", &level, &error)) {
    log.Error("TJ_LOG_LEVEL: " + error);
    return false;
  }
  log.SetLevel(level);
  return true;
}

// The API server's clients: one for everything (every request counted in `metrics`,
// rest_client_* on /metrics), and a transport of its own for pod logs (the evaluator's final
// evaluation): at most 64 KiB each (tenant_reads.h) within 5 s, so a slow log read holds a
// reconcile briefly.
struct ApiClients {
  tj::kube::RestConfig config;
  std::unique_ptr<tj::kube::RequestMetrics> metrics;
  std::unique_ptr<tj::kube::RestClient> client;
  std::unique_ptr<tj::kube::HttpTransport> log_transport;
};

// An exit code (said in the log) when the kubeconfig or a transport cannot be had.
std::optional<int> ConnectToApiServer(const Flags& f, tj::Clock* clock, tj::EventLog& log,
                                      ApiClients* out) {
  auto config = tj::kube::LoadConfig(f.kubeconfig, tj::kube::ProcessEnvironment());
  if (!config.ok()) {
    log.Error(config.status().message());
    return 1;
  }
  config->qps = f.qps;
  config->burst = f.burst;
  config->user_agent = "tj-operator";
  out->config = *config;
  out->metrics =
      std::make_unique<tj::kube::RequestMetrics>(tj::kube::RequestMetrics::HostOf(config->server));
  auto api_transport = tj::kube::NewCurlTransport(*config);
  if (!api_transport.ok()) {
    log.Error("API server " + config->server + ": " + api_transport.status().message());
    return 1;
  }
  out->client = std::make_unique<tj::kube::RestClient>(
      *config,
      std::make_unique<tj::kube::MeteredTransport>(std::move(api_transport).value(),
                                                   out->metrics.get(), clock),
      clock);
  tj::kube::RestConfig log_config = *config;
  log_config.timeout = std::chrono::seconds(5);
  auto log_transport = tj::kube::NewCurlTransport(log_config);
  if (!log_transport.ok()) {
    log.Error(log_transport.status().message());
    return 1;
  }
  out->log_transport = std::move(log_transport).value();
  return std::nullopt;
}

// The informers the operator adds where it may list what they watch (job_informers.h), said in
// the log: Kueue's objects (with every queued job's Workload), each kind of PodGroup, and the
// cluster's Nodes (the lost-node rules: without them, one warning says what is missing and no
// pass judges a node); and whether the API server serves Kubernetes' own PodGroups
// (docs/gangs.md: jobs whose gang is Auto get one), from the same discovery answer. Looked for
// once: Kueue or a scheduler installed (or the operator given the right) later needs the
// operator restarted; until then Kueue's objects are read from the API server when a pass
// needs them (a queued job's Workload on every pass, polled every 2 s). A server that does not
// answer is taken to serve no PodGroup.
void WatchWherePermitted(tj::kube::Client* client, tj::Clock* clock, const std::string& ns,
                         tj::kube::WorkQueue* queue, tj::EventLog& log,
                         tj::controller::JobInformers* informers,
                         tj::controller::Executor* executor) {
  namespace kueue = tj::controller::kueue;
  namespace gang = tj::controller::gang;
  auto watchable = [&](const std::string& what,
                       const std::vector<const tj::kube::Resource*>& resources) {
    auto w = tj::controller::Watchable(*client, resources, ns);
    if (!w.ok()) {
      log.Warn(w.status().message() + ": " + what + " are not watched");
      return tj::controller::Watchability{};
    }
    log.Emit(
        {{"event", "watch"}, {"what", what}, {"watched", w->watchable}, {"why_not", w->why_not}});
    return *w;
  };
  if (watchable("kueue",
                {&kueue::kWorkloads, &kueue::kResourceFlavors, &kueue::kWorkloadPriorityClasses})
          .watchable) {
    tj::controller::AddKueueInformers(informers, client, clock, ns, queue, &log);
    executor->set_kueue_caches(informers->Kueue());
  }
  for (gang::Kind kind : gang::kKinds) {
    const tj::kube::Resource& r = gang::ResourceOf(kind);
    const tj::controller::Watchability w = watchable(r.plural + "." + r.api_version, {&r});
    if (w.watchable) tj::controller::AddPodGroupInformer(informers, kind, client, clock, ns, &log);
    if (kind == gang::Kind::kNative) {
      log.Emit({{"event", "native_pod_groups"}, {"served", w.served}});
      executor->set_native_pod_groups(w.served);
    }
  }
  executor->set_pod_group_caches(informers->PodGroups());
  const tj::controller::Watchability nodes = watchable("nodes", {&tj::kube::resources::kNodes});
  if (nodes.watchable) {
    tj::controller::AddNodeInformer(informers, client, clock, queue, &log);
    executor->set_node_cache(&informers->nodes->cache());
  } else if (nodes.served) {  // forbidden (an error of the server was said above)
    log.Warn(nodes.why_not +
             " (grant list and watch on nodes, cluster-wide): lost nodes are not noticed; a "
             "job's pod on one waits for Kubernetes' eviction, and a pod stuck terminating "
             "there keeps the job's next gang from starting");
  }
}

// The API server's version, read once (GET /version): an exit code, said in the log, when it
// is older than the operator needs (kube::MinimumServerVersion), is not a version, or cannot
// be read. The client retries transport errors and 5xx answers for about half a minute; an
// unreachable server is tried for two minutes in all.
std::optional<int> CheckApiServerVersion(tj::kube::Client* client, const std::string& server,
                                         const std::stop_source& stop, tj::EventLog& log,
                                         tj::kube::ServerVersion* out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  auto answer = client->Raw("GET", "/version");
  while (!answer.ok() && std::chrono::steady_clock::now() < deadline && !stop.stop_requested()) {
    log.Warn("API server " + server + ": reading its version: " + answer.error().ToString() +
             "; trying again");
    std::this_thread::sleep_for(std::chrono::seconds(5));
    answer = client->Raw("GET", "/version");
  }
  if (!answer.ok()) {
    log.Error("API server " + server + ": reading its version: " + answer.error().ToString() +
              " (gave up after 2 minutes: check --kubeconfig and that the server answers)");
    return 1;
  }
  auto version = tj::kube::ParseVersionInfo(*answer);
  tj::Status s = version.ok()
                     ? tj::kube::CheckServerVersion(*version, tj::kube::MinimumServerVersion())
                     : version.status();
  if (!s.ok()) {
    log.Error("API server " + server + ": " + s.message());
    return 1;
  }
  log.Emit({{"event", "api_server_version"}, {"server", server}, {"version", version->text}});
  *out = *version;
  return std::nullopt;
}

// The first Kubernetes whose kubelet restarts a pod's containers in place on a container
// restart rule's RestartAllContainers action by default (its feature gate beta, on).
constexpr int kInPlaceRestartMinor = 36;

// Whether gangs may restart in place (--restart-in-place, the server's version). When they may
// not, the log says why now; when they may, each gang's choice reads the nodes (ChooseInPlace),
// and the executor says what they allow once the informers have synced, and whenever that
// changes (Executor::SayInPlaceChoice).
bool DecideRestartInPlace(const Flags& f, const tj::kube::ServerVersion& server,
                          tj::EventLog& log) {
  const bool recent = server >= tj::kube::ServerVersion{1, kInPlaceRestartMinor, 0, ""};
  const bool may = f.restart_in_place == "auto" && recent;
  if (!may) {
    const std::string why =
        f.restart_in_place == "never"
            ? "--restart-in-place=never"
            : "the API server is " + server.text + ", older than 1.36: its kubelets cannot";
    log.Emit({{"event", "restart_in_place"}, {"enabled", false}, {"why", why}});
  }
  return may;
}

// The API server's version checked (CheckApiServerVersion: an exit code when it will not do)
// and what follows from it for the executor: whether gang pods restart in place.
std::optional<int> AdaptToApiServer(tj::kube::Client* client, const Flags& f,
                                    const std::string& server, const std::stop_source& stop,
                                    tj::EventLog& log, tj::controller::Executor* executor) {
  tj::kube::ServerVersion version;
  if (auto code = CheckApiServerVersion(client, server, stop, log, &version)) return code;
  executor->set_restart_in_place(DecideRestartInPlace(f, version, log));
  return std::nullopt;
}

// --leader-elect: the Lease renewed through a client of its own, an elector and its thread.
struct Leadership {
  std::unique_ptr<tj::kube::RestClient> client;
  std::unique_ptr<tj::kube::LeaderElector> elector;
  std::jthread thread;
};

// Starts campaigning for the Lease. While this instance leads `leading` is true; when it
// starts, every job in `jobs` is enqueued. An exit code when the election cannot start.
std::optional<int> StartLeaderElection(const Flags& f, const tj::kube::RestConfig& config,
                                       tj::Clock* clock, const std::string& identity,
                                       const tj::kube::ObjectCache& jobs,
                                       tj::kube::WorkQueue& queue, std::atomic<bool>& leading,
                                       std::stop_source& stop, tj::EventLog& log, Leadership* out) {
  tj::kube::LeaderElectionConfig lc;
  lc.lease_namespace = !f.lease_ns.empty() ? f.lease_ns : (!f.ns.empty() ? f.ns : "default");
  lc.lease_name = f.lease_name;
  lc.identity = identity;
  tj::kube::LeaderCallbacks cb;
  cb.on_started_leading = [&] {
    log.Emit({{"event", "leading"}, {"identity", identity}});
    leading = true;
    // Look at every job once now that this instance acts.
    for (const auto& key : jobs.Keys()) queue.Add(key);
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
  auto lease_client = tj::kube::RestClient::New(tj::kube::LeaseClientConfig(config, lc), clock);
  if (!lease_client.ok()) {
    log.Error(lease_client.status().message());
    return 1;
  }
  out->client = std::move(*lease_client);
  out->elector = std::make_unique<tj::kube::LeaderElector>(out->client.get(), clock, lc, cb, &log);
  tj::Status v = out->elector->Validate();
  if (!v.ok()) {
    log.Error(v.message());
    return 2;
  }
  out->thread = std::jthread([out, &log, &stop](const std::stop_token&) {
    tj::Status s = out->elector->Run(stop.get_token());
    if (!s.ok()) log.Error(s.message());
    stop.request_stop();
  });
  return std::nullopt;
}

// An HTTP server listening on a bind-address flag's value ("host:port", ":port"; "0" for none);
// an error (not an address, the port in use, a host that does not resolve) names the flag.
tj::StatusOr<std::unique_ptr<tj::HttpServer>> ServeOn(
    const std::string& flag, const std::string& address,
    std::map<std::string, tj::HttpServer::Handler> handlers) {
  auto a = tj::ParseListenAddress(address);
  if (!a.ok()) return a.status().WithContext(flag);
  auto server = std::make_unique<tj::HttpServer>(a->host, a->port, std::move(handlers));
  if (tj::Status s = server->Start(); !s.ok()) return s.WithContext(flag);
  return server;
}

// /healthz (no reconcile worker stuck in one pass: controller::StuckWorker) and /readyz (the
// informers have synced).
std::map<std::string, tj::HttpServer::Handler> ProbeHandlers(
    const std::atomic<bool>& synced, const tj::controller::WorkerPasses& passes) {
  return {{"/healthz",
           [&passes] {
             const std::string stuck =
                 tj::controller::StuckWorker(passes, tj::controller::kMaxPassDuration);
             return stuck.empty() ? tj::HttpAnswer{200, "text/plain", "ok\n"}
                                  : tj::HttpAnswer{503, "text/plain", stuck + "\n"};
           }},
          {"/readyz", [&synced] {
             return synced.load() ? tj::HttpAnswer{200, "text/plain", "ok\n"}
                                  : tj::HttpAnswer{503, "text/plain", "informers not synced yet\n"};
           }}};
}

// Starts the informers and waits until each has listed; false when asked to stop first.
bool StartAndSync(const tj::controller::JobInformers& informers, const std::stop_source& stop) {
  for (auto* inf : informers.All()) inf->Start();
  for (auto* inf : informers.All()) {
    while (!inf->WaitForSync(std::chrono::seconds(1))) {
      if (stop.stop_requested()) return false;
    }
  }
  return true;
}

// The network-policy subcommand: the NetworkPolicy the operator makes for each TrainingJob in
// `f.network_policy_file` (its metadata.namespace, else "default"), as JSON.
int PrintNetworkPolicies(const Flags& f) {
  const std::string& file = f.network_policy_file;
  const std::optional<std::vector<json>> docs = ReadManifests(file, "network-policy");
  if (!docs) return 1;
  json items = json::array();
  for (json doc : *docs) {
    if (tj::kube::TextOf(doc, "kind") != tj::api::kKind) continue;
    json& md = doc["metadata"];
    if (!md.is_object()) md = json::object();
    if (tj::kube::TextOf(md, "namespace").empty()) md["namespace"] = "default";
    auto spec = tj::api::ParseSpec(doc.value("spec", json::object()));
    if (!spec.ok()) {
      std::cerr << "tj-operator network-policy: TrainingJob " << tj::kube::TextOf(md, "name")
                << ": " << spec.status().message() << "\n";
      return 1;
    }
    items.push_back(tj::controller::BuildNetworkPolicy(doc, *spec, *f.network_policy_settings));
  }
  if (items.empty()) {
    std::cerr << "tj-operator network-policy: " << file << " holds no TrainingJob\n";
    return 1;
  }
  PrintObjects(items);
  return 0;
}

tj::controller::ReconcilerOptions ReconcilerOptionsOf(const Flags& f) {
  tj::controller::ReconcilerOptions o;
  o.evaluator_grace = std::chrono::seconds(f.evaluator_grace_s);
  o.progress_poll = std::chrono::seconds(f.progress_poll_s);
  o.restart_backoff_base = std::chrono::milliseconds(f.backoff_base_ms);
  o.failure_settle = std::chrono::seconds(f.failure_settle_s);
  o.kueue_priority_boost_max = f.kueue_priority_boost_max;
  o.kueue_priority_boost_per = std::chrono::seconds(f.kueue_priority_boost_seconds);
  o.lost_node_force_delete = std::chrono::seconds(f.lost_node_force_delete_s);
  if (f.network_policy) o.network_policy = f.network_policy_settings;
  return o;
}

// The executor's pod log reads, through the clients' log transport (taken from `api`).
auto PodLogFunction(ApiClients* api) {
  auto pod_logs =
      std::make_shared<tj::controller::PodLogReader>(api->config, std::move(api->log_transport));
  return
      [pod_logs](const std::string& pod_ns, const std::string& pod, const std::string& container) {
        return pod_logs->Read(pod_ns, pod, container);
      };
}

// /metrics on --metrics-bind-address: the operator's, its work queue's and its API client's.
auto ServeMetrics(const Flags& f, tj::kube::WorkQueue& queue,
                  tj::controller::OperatorMetrics& metrics, const std::atomic<bool>& leading,
                  const ApiClients& api, const tj::controller::TrainerStatusPoller& poller) {
  return ServeOn(
      "--metrics-bind-address", f.metrics_addr,
      {{"/metrics", [&] {
          tj::controller::OperatorMetrics::QueueStats q{queue.Len(), queue.adds(), queue.retries(),
                                                        queue.queue_duration(),
                                                        queue.work_duration()};
          const tj::controller::OperatorMetrics::PollStats polls{poller.polls(),
                                                                 poller.in_flight()};
          return tj::HttpAnswer{200, tj::kPrometheusContentType,
                                metrics.Render(q, leading.load(), api.metrics.get(), &polls)};
        }}});
}

int main(int argc, char** argv) {
  // SIGTERM/SIGINT stop the operator. First thing: every thread started later (the HTTP
  // client's pool among them) inherits the blocked mask, so no thread dies of the signal.
  std::stop_source stop = tj::StopOnTerminationSignals();
  // Without jemalloc (see malloc_conf above): two glibc arenas instead of one per thread (up
  // to 8 per core), which would each keep their own mostly empty heap.
  mallopt(M_ARENA_MAX, 2);
  Flags f;
  if (auto code = ParseFlags(argc, argv, f)) return *code;
  if (f.convert) return Convert(f.convert_file);
  if (f.print_network_policy) return PrintNetworkPolicies(f);

  // Every line with its time and level (common/event_log.h), as Kubernetes components log.
  tj::EventLog log(f.log_format == "text" ? tj::LogFormat::kText : tj::LogFormat::kJson, stdout,
                   stderr, tj::LogStyle::kStructured);
  if (!ApplyLogLevel(log)) return 2;
  tj::RealClock* clock = tj::RealClock::Get();
  ApiClients api;
  if (auto code = ConnectToApiServer(f, clock, log, &api)) return *code;
  tj::kube::RestClient* client = api.client.get();

  // Every job's rendezvous key comes from the kernel (RandomHex): say so now if it refuses (a
  // seccomp profile without getrandom), rather than when the first job needs a key.
  if (auto probe = tj::SecureRandomHex(1); !probe.ok()) {
    log.Error("cannot make random keys: " + probe.status().message());
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
  // The trainers' /status off the reconcile workers: at most 16 reads at once, 1.5 s each, a
  // pod at most once per --progress-poll-seconds.
  tj::controller::TrainerStatusPoller status_poller(
      tj::controller::ReadTrainerStatus, [&queue](const std::string& key) { queue.Add(key); }, 16,
      std::chrono::seconds(f.progress_poll_s), clock);
  deps.status_poller = &status_poller;
  deps.pod_log = PodLogFunction(&api);
  const tj::controller::ReconcilerOptions ropts = ReconcilerOptionsOf(f);

  // Informers: the jobs, and everything labelled with a job's name (enqueue its job).
  tj::controller::ReportedBackups reported_backups(clock);
  deps.reported_backups = &reported_backups;
  tj::controller::DepartedPods departed(clock);
  deps.departed_pods = &departed;
  tj::controller::JobInformers informers = tj::controller::MakeJobInformers(
      client, clock, f.ns, &queue, &log, &reported_backups, &departed, f.network_policy);
  deps.caches = informers.Caches();
  deps.clock = clock;
  // Status writes give way to other work (executor.h): the pods of a burst of jobs first.
  deps.defer_status = tj::controller::StatusDeferral{
      [&queue](const std::string& key) { return queue.BusyBesides(key); },
      [&queue](const std::string& key, std::chrono::milliseconds latest) {
        queue.AddWhenIdle(key, latest);
      }};
  tj::controller::Executor executor(deps, ropts);

  std::atomic<bool> leading{!f.leader_elect};
  std::atomic<bool> synced{false};
  tj::controller::WorkerPasses passes(f.workers);
  auto metrics_server = ServeMetrics(f, queue, metrics, leading, api, status_poller);
  auto probes = ServeOn("--health-probe-bind-address", f.probe_addr, ProbeHandlers(synced, passes));
  for (auto* s : {&metrics_server, &probes}) {
    if (!s->ok()) {
      log.Error(s->status().message() + "; choose another address with the flag");
      return 1;
    }
  }
  // After the flags' addresses are bound (a wrong one is said at once, whatever the API
  // server), before anything watches: /healthz answers while the server is waited for.
  if (auto code = AdaptToApiServer(client, f, api.config.server, stop, log, &executor)) {
    return *code;
  }
  WatchWherePermitted(client, clock, f.ns, &queue, log, &informers, &executor);

  if (!StartAndSync(informers, stop)) return 0;
  synced = true;
  executor.SayInPlaceChoice();  // the nodes read: whether new gangs restart in place
  log.Emit({{"event", "operator_started"},
            {"identity", identity},
            {"namespace", f.ns.empty() ? "(all)" : f.ns},
            {"workers", f.workers},
            {"leader_elect", f.leader_elect}});

  Leadership leadership;
  if (f.leader_elect) {
    if (auto code = StartLeaderElection(f, api.config, clock, identity, informers.jobs->cache(),
                                        queue, leading, stop, log, &leadership)) {
      return *code;
    }
  }

  std::vector<std::jthread> threads = tj::controller::StartReconcileWorkers(
      f.workers, &queue, &executor, &metrics, &log, &leading, &passes);

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
  if (leadership.thread.joinable()) leadership.thread.join();
  for (auto* inf : informers.All()) inf->Stop();
  (*metrics_server)->Stop();
  (*probes)->Stop();
  return 0;
}
