// tj-process-node: flags and wiring only; see node_agent.h.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <stop_token>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/termination_signals.h"
#include "kube/config.h"
#include "kube/rest_client.h"
#include "processnode/node_agent.h"

int main(int argc, char** argv) {
  tj::processnode::NodeAgentOptions o;
  o.node_name = "local-node";
  o.state_dir = ".local-cluster/node";
  o.log_dir = ".local-cluster/logs";
  o.bin_dir = "build/bin";
  std::string kubeconfig;
  std::string mount_namespace = "auto";
  int heartbeat_seconds = 10;
  CLI::App app{"tj-process-node: the process node of the local test cluster (a kubelet stand-in)"};
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig of the cluster to join")->required();
  app.add_option("--node-name", o.node_name, "name of the Node object")->capture_default_str();
  app.add_option("--state-dir", o.state_dir, "pods' working directories and volumes")
      ->capture_default_str();
  app.add_option("--log-dir", o.log_dir, "containers' logs")->capture_default_str();
  app.add_option("--bin-dir", o.bin_dir, "where the images' programs are found")
      ->capture_default_str();
  app.add_option("--kubelet-port", o.kubelet_port, "port of the kubelet API (logs); 0: none")
      ->check(CLI::Range(0, 65535));
  app.add_option("--tls-cert-file", o.tls_cert_file, "certificate of the kubelet API");
  app.add_option("--tls-key-file", o.tls_key_file, "key of the kubelet API");
  app.add_option("--heartbeat-seconds", heartbeat_seconds, "Node status heartbeat")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--mount-namespace", mount_namespace,
                 "run pods in a mount namespace of their own (auto: when root)")
      ->check(CLI::IsMember({"auto", "true", "false"}))
      ->capture_default_str();
  app.add_option("--pod-network", o.pod_network,
                 "second octet of the pods' addresses 127.N.x.y (two clusters on one machine "
                 "use two networks)")
      ->check(CLI::Range(0, 255));
  app.add_option("--kubelet-version", o.kubelet_version,
                 "the Node's kubeletVersion (the cluster's release, e.g. v1.37.2)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.heartbeat = std::chrono::seconds(heartbeat_seconds);
  o.mount_namespace = mount_namespace == "true" || (mount_namespace == "auto" && geteuid() == 0);

  // SIGTERM/SIGINT end Run(): blocked here, before any thread starts (the REST client's
  // I/O threads among them), so that every thread inherits the mask. A thread started
  // earlier would take the signal's default action and kill the agent without stopping its
  // pods.
  std::stop_source stop = tj::StopOnTerminationSignals();
  tj::EventLog log(tj::LogFormat::kJson, stdout, stderr, tj::LogStyle::kStructured);
  auto config = tj::kube::LoadConfig(kubeconfig, tj::kube::ProcessEnvironment());
  if (!config.ok()) {
    log.Error(config.status().message());
    return 1;
  }
  config->qps = 50;
  config->burst = 100;
  config->user_agent = "tj-process-node";
  auto client = tj::kube::RestClient::New(*config, tj::RealClock::Get());
  if (!client.ok()) {
    log.Error(client.status().message());
    return 1;
  }
  o.api_server = config->server;

  tj::processnode::NodeAgent agent(client->get(), tj::RealClock::Get(), o, &log);
  tj::Status s = agent.Run(stop.get_token());
  if (!s.ok()) {
    log.Error(s.message());
    return 1;
  }
  return 0;
}
