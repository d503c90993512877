// tj-local-node: flags and wiring only; see node_agent.h.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <stop_token>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/event_log.h"
#include "common/termination_signals.h"
#include "operator/kube/config.h"
#include "operator/kube/rest_client.h"
#include "operator/localnode/node_agent.h"

namespace {

constexpr const char* kUsage =
    "usage: tj-local-node --kubeconfig=FILE [--node-name=local-node] --state-dir=DIR "
    "--log-dir=DIR --bin-dir=DIR [--kubelet-port=N --tls-cert-file=F --tls-key-file=F] "
    "[--heartbeat-seconds=10] [--mount-namespace=auto|true|false] [--pod-network=0..255]\n";

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags = {{"kubeconfig", ""},
                                              {"node-name", "local-node"},
                                              {"state-dir", ".local-cluster/node"},
                                              {"log-dir", ".local-cluster/logs"},
                                              {"bin-dir", "build/bin"},
                                              {"kubelet-port", "0"},
                                              {"tls-cert-file", ""},
                                              {"tls-key-file", ""},
                                              {"heartbeat-seconds", "10"},
                                              {"mount-namespace", "auto"},
                                              {"pod-network", "0"}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos || !flags.count(a.substr(2, eq - 2))) {
      std::fprintf(stderr, "tj-local-node: unknown argument %s\n%s", a.c_str(), kUsage);
      return 2;
    }
    flags[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  // SIGTERM/SIGINT end Run(): blocked here, before any thread starts (the REST client's
  // I/O threads among them), so that every thread inherits the mask. A thread started
  // earlier would take the signal's default action and kill the agent without stopping its
  // pods.
  std::stop_source stop = tj::StopOnTerminationSignals();
  tj::EventLog log(tj::LogFormat::kJson, stdout, stderr, tj::LogStyle::kStructured);
  auto config = tj::kube::LoadConfig(flags["kubeconfig"], tj::kube::ProcessEnvironment());
  if (!config.ok()) {
    log.Error(config.status().message());
    return 1;
  }
  config->qps = 50;
  config->burst = 100;
  config->user_agent = "tj-local-node";
  auto client = tj::kube::RestClient::New(*config, tj::RealClock::Get());
  if (!client.ok()) {
    log.Error(client.status().message());
    return 1;
  }
  tj::localnode::NodeAgentOptions o;
  o.node_name = flags["node-name"];
  o.state_dir = flags["state-dir"];
  o.log_dir = flags["log-dir"];
  o.bin_dir = flags["bin-dir"];
  o.api_server = config->server;
  o.kubelet_port = std::atoi(flags["kubelet-port"].c_str());
  o.tls_cert_file = flags["tls-cert-file"];
  o.tls_key_file = flags["tls-key-file"];
  o.heartbeat = std::chrono::seconds(std::max(1, std::atoi(flags["heartbeat-seconds"].c_str())));
  char* end = nullptr;
  const long network = std::strtol(flags["pod-network"].c_str(), &end, 10);
  if (flags["pod-network"].empty() || *end != '\0' || network < 0 || network > 255) {
    std::fprintf(stderr,
                 "tj-local-node: --pod-network=%s: expected 0..255, the second octet of "
                 "the pods' addresses 127.N.x.y\n%s",
                 flags["pod-network"].c_str(), kUsage);
    return 2;
  }
  o.pod_network = static_cast<int>(network);
  const std::string mn = flags["mount-namespace"];
  o.mount_namespace = mn == "true" || (mn == "auto" && geteuid() == 0);

  tj::localnode::NodeAgent agent(client->get(), tj::RealClock::Get(), o, &log);
  tj::Status s = agent.Run(stop.get_token());
  if (!s.ok()) {
    log.Error(s.message());
    return 1;
  }
  return 0;
}
