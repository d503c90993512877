// hack/local-cluster.sh up with tj-process-node: a Ready node, pods that run as processes, exit
// codes, restart policies, logs through `kubectl logs`, graceful deletion, pod DNS names,
// service-account tokens for pods that call the API server, probes, and restarts of the node
// agent (pods adopted after a crash, stopped by a node shutdown, killed when deleted meanwhile).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "tests/integration/kube/local_cluster.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using testing::Eventually;
using testing::LocalCluster;
using tj::testing::ReadBytes;
using tj::testing::WriteBytes;

json ShPod(const std::string& name, const std::string& script,
           const std::string& restart_policy = "Never") {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"restartPolicy", restart_policy},
            {"terminationGracePeriodSeconds", 5},
            {"containers",
             json::array(
                 {{{"name", "main"}, {"image", "busybox"}, {"command", {"sh", "-c", script}}}})}}}};
}

std::string Kubectl(const LocalCluster* c, const std::string& args) {
  std::string out;
  FILE* p = popen(("kubectl --kubeconfig " + c->kubeconfig() + " " + args + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

json Terminated(const json& pod) {
  const json st = pod.value("status", json::object());
  if (!st.contains("containerStatuses") || st["containerStatuses"].empty()) return nullptr;
  const json& s = st["containerStatuses"][0]["state"];
  return s.contains("terminated") ? s["terminated"] : json(nullptr);
}

TEST(ProcessNode, NodeIsReady) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  auto node = client->Get(resources::kNodes, "", "local-node");
  ASSERT_TRUE(node.ok()) << node.status().message();
  bool ready = false;
  for (const auto& c : (*node)["status"]["conditions"]) {
    if (c["type"] == "Ready") ready = c["status"] == "True";
  }
  EXPECT_TRUE(ready);
  EXPECT_TRUE((*node)["status"]["capacity"].contains("cpu"));
  for (const auto& t : (*node)["spec"].value("taints", json::array())) {
    EXPECT_NE(t["key"], "node.kubernetes.io/not-ready");
  }
  EXPECT_TRUE(client->Get(resources::kLeases, "kube-node-lease", "local-node").ok());
  EXPECT_NE(Kubectl(cluster, "get nodes").find(" Ready"), std::string::npos);
}

TEST(ProcessNode, PodExitingThreeFailsWithExitCodeAndLogs) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "exit3");
  ASSERT_TRUE(client->Create(resources::kPods, ns, ShPod("hello", "echo hello; exit 3")).ok());
  json pod;
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client->Get(resources::kPods, ns, "hello");
        if (p.ok()) pod = *p;
        return p.ok() && pod["status"].value("phase", "") == "Failed";
      },
      std::chrono::seconds(60)))
      << pod.dump(2);
  json term = Terminated(pod);
  ASSERT_FALSE(term.is_null()) << pod.dump(2);
  EXPECT_EQ(term["exitCode"], 3);
  EXPECT_EQ(term["reason"], "Error");
  EXPECT_EQ(pod["spec"]["nodeName"], "local-node");
  EXPECT_EQ(pod["status"]["podIP"].get<std::string>().rfind("127.", 0), 0u);
  EXPECT_EQ(Kubectl(cluster, "logs -n " + ns + " hello"), "hello\n");
}

TEST(ProcessNode, OnFailureRestartsInPlaceAndCountsRestarts) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "onfailure");
  // Fails the first time (the working directory is the pod's own), succeeds the second.
  ASSERT_TRUE(client
                  ->Create(resources::kPods, ns,
                           ShPod("flaky",
                                 "if [ -f ran ]; then echo second; exit 0; fi; "
                                 "touch ran; echo first; exit 1",
                                 "OnFailure"))
                  .ok());
  json pod;
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client->Get(resources::kPods, ns, "flaky");
        if (p.ok()) pod = *p;
        return p.ok() && pod["status"].value("phase", "") == "Succeeded";
      },
      std::chrono::seconds(60)))
      << pod.dump(2);
  const json& cs = pod["status"]["containerStatuses"][0];
  EXPECT_EQ(cs["restartCount"], 1);
  EXPECT_EQ(cs["lastState"]["terminated"]["exitCode"], 1);
  EXPECT_EQ(cs["state"]["terminated"]["exitCode"], 0);
  EXPECT_EQ(Kubectl(cluster, "logs -n " + ns + " flaky"), "first\nsecond\n");
  // The kubelet's tailLines and limitBytes, through the API server.
  EXPECT_EQ(Kubectl(cluster, "logs -n " + ns + " flaky --tail=1"), "second\n");
  EXPECT_EQ(Kubectl(cluster, "logs -n " + ns + " flaky --limit-bytes=3"), "fir");
}

TEST(ProcessNode, GracefulDeletionSendsSigtermThenRemovesThePod) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "graceful");
  ASSERT_TRUE(client
                  ->Create(resources::kPods, ns,
                           ShPod("server",
                                 "trap 'echo got TERM; exit 0' TERM; echo up; "
                                 "while true; do sleep 0.1; done"))
                  .ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client->Get(resources::kPods, ns, "server");
        return p.ok() && (*p)["status"].value("phase", "") == "Running";
      },
      std::chrono::seconds(60)));
  std::string log = cluster->dir() + "/logs/pods/" + ns + "_server_main.log";
  ASSERT_TRUE(Eventually([&] { return Kubectl(cluster, "logs -n " + ns + " server") == "up\n"; }));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(client->Delete(resources::kPods, ns, "server").ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client->Get(resources::kPods, ns, "server");
        return !p.ok() && IsNotFound(p.error());
      },
      std::chrono::seconds(30)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // < grace period
  ASSERT_TRUE(std::filesystem::exists(log)) << log;
  EXPECT_EQ(ReadBytes(log), "up\ngot TERM\n");
}

TEST(ProcessNode, PodsResolveEachOthersNamesAndGetEnvFromTheApi) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  if (geteuid() != 0) GTEST_SKIP() << "private /etc/hosts needs a mount namespace (root)";
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "dns");
  ASSERT_TRUE(client
                  ->Create(resources::kSecrets, ns,
                           {{"apiVersion", "v1"},
                            {"kind", "Secret"},
                            {"metadata", {{"name", "key"}}},
                            {"stringData", {{"k", "s3cret"}}}})
                  .ok());
  for (int i = 0; i < 2; ++i) {
    json pod = ShPod("job-worker-" + std::to_string(i),
                     "echo KEY=$KEY POD=$POD; sleep 1; "
                     "getent hosts job-worker-0.job." +
                         ns + ".svc job-worker-1.job." + ns +
                         ".svc >/dev/null || sleep 2; "
                         "getent hosts job-worker-1.job." +
                         ns + ".svc | cut -d' ' -f1");
    pod["spec"]["hostname"] = "job-worker-" + std::to_string(i);
    pod["spec"]["subdomain"] = "job";
    pod["spec"]["containers"][0]["env"] = json::array(
        {{{"name", "KEY"}, {"valueFrom", {{"secretKeyRef", {{"name", "key"}, {"key", "k"}}}}}},
         {{"name", "POD"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}}});
    ASSERT_TRUE(client->Create(resources::kPods, ns, pod).ok());
  }
  json w1;
  ASSERT_TRUE(Eventually(
      [&] {
        auto a = client->Get(resources::kPods, ns, "job-worker-0");
        auto b = client->Get(resources::kPods, ns, "job-worker-1");
        if (b.ok()) w1 = *b;
        return a.ok() && b.ok() && (*a)["status"].value("phase", "") == "Succeeded" &&
               (*b)["status"].value("phase", "") == "Succeeded";
      },
      std::chrono::seconds(60)));
  std::string ip1 = w1["status"]["podIP"];
  EXPECT_EQ(Kubectl(cluster, "logs -n " + ns + " job-worker-0"),
            "KEY=s3cret POD=job-worker-0\n" + ip1 + "\n");
}

TEST(ProcessNode, ClaimsAreBoundAndSharedBetweenPods) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  if (geteuid() != 0) GTEST_SKIP() << "volume mounts need a mount namespace (root)";
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "pvc");
  ASSERT_TRUE(client
                  ->Create(resources::kPersistentVolumeClaims, ns,
                           {{"apiVersion", "v1"},
                            {"kind", "PersistentVolumeClaim"},
                            {"metadata", {{"name", "shared"}}},
                            {"spec",
                             {{"accessModes", {"ReadWriteMany"}},
                              {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}})
                  .ok());
  auto with_claim = [](json pod) {
    pod["spec"]["volumes"] =
        json::array({{{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "shared"}}}}});
    pod["spec"]["containers"][0]["volumeMounts"] =
        json::array({{{"name", "data"}, {"mountPath", "/tj-e2e-data"}}});
    return pod;
  };
  ASSERT_TRUE(client
                  ->Create(resources::kPods, ns,
                           with_claim(ShPod("writer", "echo 42 > /tj-e2e-data/answer")))
                  .ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client->Get(resources::kPods, ns, "writer");
        return p.ok() && (*p)["status"].value("phase", "") == "Succeeded";
      },
      std::chrono::seconds(60)));
  ASSERT_TRUE(
      client->Create(resources::kPods, ns, with_claim(ShPod("reader", "cat /tj-e2e-data/answer")))
          .ok());
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client->Get(resources::kPods, ns, "reader");
        return p.ok() && (*p)["status"].value("phase", "") == "Succeeded";
      },
      std::chrono::seconds(60)));
  EXPECT_EQ(Kubectl(cluster, "logs -n " + ns + " reader"), "42\n");
  // The mount point the pods needed is gone with them.
  ASSERT_TRUE(client->Delete(resources::kPods, ns, "reader").ok());
  ASSERT_TRUE(client->Delete(resources::kPods, ns, "writer").ok());
  EXPECT_TRUE(Eventually([] { return access("/tj-e2e-data", F_OK) != 0; }));
  auto pvc = client->Get(resources::kPersistentVolumeClaims, ns, "shared");
  ASSERT_TRUE(pvc.ok());
  EXPECT_EQ((*pvc)["status"]["phase"], "Bound");
}

// What a kubelet gives a pod for in-cluster configuration: the ServiceAccount admission plugin
// adds a projected volume, the node fills it (a TokenRequest token bound to the pod,
// kube-root-ca.crt, the namespace) and sets KUBERNETES_SERVICE_HOST/_PORT. The token
// authenticates as the pod's ServiceAccount, and RBAC allows exactly what its Role grants.
TEST(ProcessNode, PodCallsTheApiServerWithItsServiceAccountToken) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "satoken");
  ASSERT_TRUE(client
                  ->Raw("POST", "/api/v1/namespaces/" + ns + "/serviceaccounts",
                        json{{"apiVersion", "v1"},
                             {"kind", "ServiceAccount"},
                             {"metadata", {{"name", "reader"}}}})
                  .ok());
  auto role =
      client->Raw("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns + "/roles",
                  json{{"apiVersion", "rbac.authorization.k8s.io/v1"},
                       {"kind", "Role"},
                       {"metadata", {{"name", "pod-reader"}}},
                       {"rules", json::array({{{"apiGroups", json::array({""})},
                                               {"resources", json::array({"pods"})},
                                               {"verbs", json::array({"get", "list"})}}})}});
  ASSERT_TRUE(role.ok()) << role.error().ToString();
  auto binding = client->Raw(
      "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns + "/rolebindings",
      json{{"apiVersion", "rbac.authorization.k8s.io/v1"},
           {"kind", "RoleBinding"},
           {"metadata", {{"name", "reader"}}},
           {"roleRef",
            {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", "pod-reader"}}},
           {"subjects",
            json::array({{{"kind", "ServiceAccount"}, {"name", "reader"}, {"namespace", ns}}})}});
  ASSERT_TRUE(binding.ok()) << binding.error().ToString();
  // Without a mount namespace (not root) the node points the pod at its copy of the files.
  json pod = ShPod(
      "caller",
      "D=${TJ_SERVICE_ACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}; "
      "U=https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; N=$(cat $D/namespace); "
      "get() { curl -sS --cacert $D/ca.crt -H \"Authorization: Bearer $(cat $D/token)\" "
      "-o /tmp/tj-sa-$$ -w '%{http_code}' \"$U$1\"; }; "
      "echo ns=$N api=$(get /api) pods=$(get /api/v1/namespaces/$N/pods) "
      "secrets=$(get /api/v1/namespaces/$N/secrets) nodes=$(get /api/v1/nodes); "
      "grep -o 'system:serviceaccount:[a-z0-9:-]*' /tmp/tj-sa-$$ | head -n1; rm -f /tmp/tj-sa-$$");
  pod["spec"]["serviceAccountName"] = "reader";
  auto created = client->Create(resources::kPods, ns, pod);
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  // The admission plugin gave it the projected volume a kubelet fills.
  bool projected_token = false;
  for (const auto& v : (*created)["spec"].value("volumes", json::array())) {
    for (const auto& src : v.value("projected", json::object()).value("sources", json::array())) {
      projected_token = projected_token || src.contains("serviceAccountToken");
    }
  }
  EXPECT_TRUE(projected_token) << created->dump(2);
  json got;
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client->Get(resources::kPods, ns, "caller");
        if (p.ok()) got = *p;
        std::string phase = p.ok() ? got["status"].value("phase", "") : "";
        return phase == "Succeeded" || phase == "Failed";
      },
      std::chrono::seconds(60)))
      << got.dump(2);
  EXPECT_EQ(got["status"]["phase"], "Succeeded") << got.dump(2);
  EXPECT_EQ(Kubectl(cluster, "logs -n " + ns + " caller"),
            "ns=" + ns + " api=200 pods=200 secrets=403 nodes=403\n" +
                "system:serviceaccount:" + ns + ":reader\n");
}

// Probes as a kubelet runs them: the liveness probe fails on the first run (no `ready` file),
// the container is killed and restarted in place; the second run creates the file, both
// probes pass and the pod becomes Ready only then.
TEST(ProcessNode, LivenessRestartsAndReadinessGatesReady) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "probes");
  json pod = ShPod("probed",
                   "if [ -f ran ]; then touch ready; echo second; else touch ran; echo first; fi; "
                   "exec sleep 60",
                   "Always");
  json check = {{"exec", {{"command", json::array({"test", "-f", "ready"})}}},
                {"periodSeconds", 1}};
  json liveness = check;
  liveness["initialDelaySeconds"] = 1;
  liveness["failureThreshold"] = 2;
  pod["spec"]["containers"][0]["livenessProbe"] = liveness;
  pod["spec"]["containers"][0]["readinessProbe"] = check;
  ASSERT_TRUE(client->Create(resources::kPods, ns, pod).ok());
  auto ready = [](const json& p) {
    for (const auto& c : p["status"].value("conditions", json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
    }
    return false;
  };
  json got;
  // Running but not Ready while the readiness probe fails.
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client->Get(resources::kPods, ns, "probed");
        if (p.ok()) got = *p;
        return p.ok() && got["status"].value("phase", "") == "Running";
      },
      std::chrono::seconds(60)))
      << got.dump(2);
  EXPECT_FALSE(ready(got)) << got.dump(2);
  ASSERT_TRUE(Eventually(
      [&] {
        auto p = client->Get(resources::kPods, ns, "probed");
        if (p.ok()) got = *p;
        return p.ok() && ready(got);
      },
      std::chrono::seconds(60)))
      << got.dump(2);
  const json& cs = got["status"]["containerStatuses"][0];
  EXPECT_EQ(cs["restartCount"], 1);
  EXPECT_TRUE(cs["ready"].get<bool>());
  EXPECT_EQ(cs["lastState"]["terminated"]["exitCode"], 137);  // killed by the liveness probe
  EXPECT_EQ(Kubectl(cluster, "logs -n " + ns + " probed"), "first\nsecond\n");
  ASSERT_TRUE(client->Delete(resources::kPods, ns, "probed").ok());
}

// --- Restarts of the node agent ------------------------------------------------------------

// A live (not zombie) process with this pid: its /proc/<pid>/stat state is not Z.
bool Alive(pid_t pid) {
  const std::string stat = ReadBytes("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

json GetPod(Client* client, const std::string& ns, const std::string& name) {
  auto p = client->Get(resources::kPods, ns, name);
  return p.ok() ? *p : json(nullptr);
}

std::string Phase(const json& pod) { return pod.is_null() ? "" : pod["status"].value("phase", ""); }

// Waits (60 s) until the pod's phase is `phase`; returns the pod as last read.
json WaitForPhase(Client* client, const std::string& ns, const std::string& name,
                  const std::string& phase) {
  json pod;
  EXPECT_TRUE(Eventually(
      [&] {
        pod = GetPod(client, ns, name);
        return Phase(pod) == phase;
      },
      std::chrono::seconds(60)))
      << pod.dump(2);
  return pod;
}

// Waits for the pod to run; returns it with the pid of its container from the agent's state.
json RunningPod(LocalCluster* cluster, Client* client, const std::string& ns,
                const std::string& name, pid_t* pid) {
  json pod = WaitForPhase(client, ns, name, "Running");
  const std::string state_file =
      cluster->dir() + "/node/pods/" + pod["metadata"].value("uid", "") + "/state.json";
  json state = json::parse(ReadBytes(state_file), nullptr, false);
  EXPECT_TRUE(state.is_object()) << state_file;
  *pid = state.is_object() ? state["containers"][0].value("pid", 0) : 0;
  return pod;
}

// A pod that waits for a file in its working directory (its own directory on the node),
// then exits 7; each start appends "started" to its log.
json WaitForFilePod(const std::string& name) {
  return ShPod(name, "echo started; while [ ! -f release ]; do sleep 0.1; done; echo done; exit 7");
}

void Release(LocalCluster* cluster, const json& pod) {
  WriteBytes(cluster->dir() + "/node/pods/" + pod["metadata"].value("uid", "") + "/release", "");
}

TEST(ProcessNodeRestart, KilledAgentAdoptsRunningPodsAndReportsTheirExit) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "adopt");
  ASSERT_TRUE(client->Create(resources::kPods, ns, WaitForFilePod("waiter")).ok());
  pid_t pid = 0;
  json before = RunningPod(cluster, client.get(), ns, "waiter", &pid);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(
      Eventually([&] { return Kubectl(cluster, "logs -n " + ns + " waiter") == "started\n"; }));

  auto restarted = cluster->Script("restart-node");  // SIGKILL, as a crash
  ASSERT_TRUE(restarted.ok()) << restarted.status().message();
  EXPECT_TRUE(Alive(pid)) << "the pod's process died with the agent";
  // The new agent reports the same run: not started again, no restart counted.
  json after;
  ASSERT_TRUE(Eventually(
      [&] {
        after = GetPod(client.get(), ns, "waiter");
        return ReadBytes(cluster->dir() + "/logs/tj-process-node.log").find("container_adopted") !=
               std::string::npos;
      },
      std::chrono::seconds(30)))
      << ReadBytes(cluster->dir() + "/logs/tj-process-node.log");
  EXPECT_EQ(Phase(after), "Running");
  EXPECT_EQ(after["status"]["podIP"], before["status"]["podIP"]);
  const json& cs = after["status"]["containerStatuses"][0];
  EXPECT_EQ(cs["restartCount"], 0);
  EXPECT_EQ(cs["state"]["running"]["startedAt"],
            before["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]);

  // Its exit code reaches the new agent, which is not its parent.
  Release(cluster, after);
  json pod = WaitForPhase(client.get(), ns, "waiter", "Failed");
  ASSERT_EQ(Phase(pod), "Failed");
  EXPECT_EQ(Terminated(pod)["exitCode"], 7);
  EXPECT_EQ(Kubectl(cluster, "logs -n " + ns + " waiter"), "started\ndone\n");
  EXPECT_FALSE(Alive(pid));
}

TEST(ProcessNodeRestart, PodDeletedWhileTheAgentIsDownIsKilledWhenItComesBack) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "orphan");
  ASSERT_TRUE(client->Create(resources::kPods, ns, WaitForFilePod("orphan")).ok());
  pid_t pid = 0;
  json pod = RunningPod(cluster, client.get(), ns, "orphan", &pid);
  ASSERT_GT(pid, 0);
  const pid_t agent = std::atoi(ReadBytes(cluster->dir() + "/pids/tj-process-node").c_str());
  ASSERT_GT(agent, 0);
  ASSERT_EQ(kill(agent, SIGKILL), 0);
  ASSERT_TRUE(Eventually([&] { return !Alive(agent); }));
  DeleteOptions force;
  force.grace_period_seconds = 0;
  ASSERT_TRUE(client->Delete(resources::kPods, ns, "orphan", force).ok());
  EXPECT_TRUE(Alive(pid));                           // nobody stopped it yet
  auto restarted = cluster->Script("restart-node");  // finds the agent dead, starts it
  ASSERT_TRUE(restarted.ok()) << restarted.status().message();
  EXPECT_TRUE(Eventually([&] { return !Alive(pid); }, std::chrono::seconds(60)))
      << "pid " << pid << " of a deleted pod still runs";
  const std::string dir = cluster->dir() + "/node/pods/" + pod["metadata"].value("uid", "");
  EXPECT_TRUE(Eventually([&] { return access(dir.c_str(), F_OK) != 0; }));
}

TEST(ProcessNodeRestart, GracefulStopEndsThePodsAndTheNextAgentReportsIt) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto client = cluster->NewClient();
  std::string ns = testing::NewNamespace(client.get(), "shutdown");
  ASSERT_TRUE(client->Create(resources::kPods, ns, WaitForFilePod("stopped")).ok());
  pid_t pid = 0;
  RunningPod(cluster, client.get(), ns, "stopped", &pid);
  ASSERT_GT(pid, 0);
  auto restarted = cluster->Script("restart-node --graceful");  // SIGTERM: a node shutdown
  ASSERT_TRUE(restarted.ok()) << restarted.status().message();
  EXPECT_FALSE(Alive(pid));
  json pod = WaitForPhase(client.get(), ns, "stopped", "Failed");
  ASSERT_EQ(Phase(pod), "Failed");
  EXPECT_EQ(Terminated(pod)["exitCode"], 143);  // SIGTERM, seen by the next agent
  EXPECT_EQ(Terminated(pod)["signal"], 15);
}

TEST(ProcessNodeRestart, RestartNodeRejectsUnknownOptions) {
  LocalCluster* cluster;
  TJ_REQUIRE_LOCAL_CLUSTER(cluster);
  auto r = cluster->Script("restart-node --gentle");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown option '--gentle'"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace tj::kube
