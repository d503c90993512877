// The rendezvous key (operator/controller/reconciler_rendezvous_key.cpp): the Secret made once,
// the hash each pod carries, the Secret made again when it goes missing and the gang restarted
// for the new key, and nothing restarted for a key that did not change.
#include <gtest/gtest.h>

#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

json WithKeyHash(json pod, const std::string& key) {
  pod["metadata"]["annotations"][kKeyHashAnnotation] = KeyHash(key);
  return pod;
}
// A pod's status while the kubelet cannot start its container for `message`.
json ConfigErrorStatus(const std::string& message) {
  return {
      {"phase", "Pending"},
      {"containerStatuses",
       json::array(
           {{{"name", "trainer"},
             {"state",
              {{"waiting", {{"reason", "CreateContainerConfigError"}, {"message", message}}}}}}})}};
}
void RecordKey(json& job, const std::string& key) {
  job["status"]["rendezvousKeyHash"] = KeyHash(key);
}

TEST(Reconcile, PodsCarryTheHashOfTheKeyTheyRead) {
  World w;  // a new job: the Secret is created with the new key in the same pass as the pods
  Decision d = Reconcile(w.in);
  for (const auto& a : d.actions) {
    if (a.kind != Action::Kind::kCreate || a.resource.plural == "services") continue;
    EXPECT_EQ(KeyHashOf(ObjectOf(a)), KeyHash("k")) << a.name;
  }
  EXPECT_EQ(StatusOf(d).rendezvous_key_hash, KeyHash("k"));  // what the operator knows of it
  EXPECT_EQ(KeyHash("k").rfind("sha256:", 0), 0u);
  EXPECT_EQ(KeyHash("k").size(), 7u + 16u);
  EXPECT_NE(KeyHash("k"), KeyHash("l"));
  // The Secret was made by an earlier pass (the status says so): it is not made again, and
  // pods created later read its key, whatever key this pass drew.
  World later;
  RecordKey(later.in.job, "old");
  later.in.service = json::object();
  Decision d2 = Reconcile(later.in);
  for (const auto& a : d2.actions) {
    if (a.kind != Action::Kind::kCreate) continue;
    EXPECT_EQ(a.resource.plural, "pods");
    EXPECT_EQ(KeyHashOf(ObjectOf(a)), KeyHash("old")) << a.name;
  }
}

// The Secret is deleted mid-job. The operator does not watch Secrets; a pod that the kubelet
// cannot start without it says so. The Secret is made again with a new key; pods that run
// hold the old key, pods started from now on read the new one: the whole gang restarts, even
// with backoffLimit 0 (a new key is not the job's failure), and the new gang reads one key.
TEST(Reconcile, ASecretDeletedMidJobIsMadeAgainAndTheWholeGangRestarts) {
  World w;
  w.in.job["spec"]["runPolicy"] = {{"backoffLimit", 0}};
  w.Running();
  RecordKey(w.in.job, "old");
  for (auto& p : w.in.pods) p = WithKeyHash(p, "old");
  w.in.pods[1]["status"] = ConfigErrorStatus("secret \"mnist-rendezvous-uid1\" not found");
  w.in.new_rendezvous_key = "new";
  Decision d1 = Reconcile(w.in);
  EXPECT_EQ(Created(d1), (std::vector<std::string>{"secrets/mnist-rendezvous-uid1"}));
  EXPECT_EQ(StatusOf(d1).rendezvous_key_hash, KeyHash("new"));
  ASSERT_NE(FindEvent(d1, "RendezvousSecretMissing"), nullptr);
  EXPECT_NE(FindEvent(d1, "RendezvousSecretMissing")->message.find("mnist-worker-1"),
            std::string::npos);
  EXPECT_EQ(Deleted(d1), (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1"}));
  EXPECT_TRUE(d1.job_restarted);
  EXPECT_FALSE(StatusOf(d1).IsTrue("Failed"));
  EXPECT_EQ(StatusOf(d1).restart_count, 1);
  ASSERT_NE(FindEvent(d1, "GangRestart"), nullptr);
  EXPECT_NE(FindEvent(d1, "GangRestart")->message.find("rendezvous key"), std::string::npos)
      << FindEvent(d1, "GangRestart")->message;
  w.Keep(d1);

  // Old gang gone, backoff over: the new gang carries the new key's hash; no second Secret.
  w.in.pods = {w.in.pods[2]};
  w.in.now = kT0 + seconds(2);
  w.in.new_rendezvous_key = "newer";
  Decision d2 = Reconcile(w.in);
  EXPECT_EQ(Created(d2), (std::vector<std::string>{"pods/mnist-worker-0", "pods/mnist-worker-1"}));
  for (const auto& a : d2.actions) {
    if (a.kind != Action::Kind::kCreate) continue;
    EXPECT_EQ(KeyHashOf(ObjectOf(a)), KeyHash("new"));
  }
  w.Keep(d2);
  w.in.pods = {WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 0, 1, "Running"), "new"),
               WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 1, 1, "Running"), "new"),
               w.in.pods[0]};
  Decision d3 = Reconcile(w.in);
  EXPECT_TRUE(Deleted(d3).empty());
  EXPECT_TRUE(Created(d3).empty());
  EXPECT_EQ(Cond(d3, "Running").status, "True");
}

// The status does not record the key: an operator stopped after the pass that made the
// Secret and pods, before it wrote the status. The pods agree on a key: that is the Secret's,
// taken as it is (nothing made twice). Pods that disagree (or none) and the key is unknown:
// the Secret is made again, and pods that may hold another key restart.
TEST(Reconcile, AKeyTheStatusDoesNotRecordIsTakenFromThePodsElseReplaced) {
  World w;
  w.Running();
  w.in.job["status"].erase("rendezvousKeyHash");
  for (auto& p : w.in.pods) p = WithKeyHash(p, "lost");
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(Created(d).empty());
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_EQ(StatusOf(d).rendezvous_key_hash, KeyHash("lost"));

  w.in.pods[1] = WithKeyHash(w.in.pods[1], "other");
  Decision d2 = Reconcile(w.in);
  EXPECT_EQ(Created(d2), (std::vector<std::string>{"secrets/mnist-rendezvous-uid1"}));
  EXPECT_EQ(Deleted(d2), (std::vector<std::string>{"mnist-worker-0", "mnist-worker-1"}));
  EXPECT_EQ(StatusOf(d2).rendezvous_key_hash, KeyHash("k"));
}

TEST(Reconcile, OneKeyOrAPodWithoutAHashRestartsNothing) {
  World w;
  w.Running();
  RecordKey(w.in.job, "k1");
  w.in.pods[0] = WithKeyHash(w.in.pods[0], "k1");
  w.in.pods[1] = WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Running"),
                             "k1");  // pods[1]: an older operator's, no hash
  Decision d = Reconcile(w.in);
  EXPECT_TRUE(Deleted(d).empty());
  EXPECT_TRUE(Created(d).empty());
  EXPECT_FALSE(d.job_restarted);
  // A gang of which a worker finished has trained: the other, still running with the old key,
  // is not restarted for it.
  w.in.pods[0] = WithKeyHash(w.in.pods[0], "k0");
  w.in.pods[1] = WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Succeeded", 0), "k0");
  EXPECT_FALSE(Reconcile(w.in).job_restarted);
  w.in.pods[0] = WithKeyHash(w.in.pods[0], "k1");
  w.in.pods[1] = WithKeyHash(Pod(w.in.job, ReplicaType::kWorker, 1, 0, "Running"), "k1");
  // The evaluator is not in the collective: another key does not restart the gang.
  w.in.pods[2] = WithKeyHash(w.in.pods[2], "k0");
  EXPECT_FALSE(Reconcile(w.in).job_restarted);
  // Another pod's CreateContainerConfigError (a user's ConfigMap) is not the Secret's.
  w.in.pods[2]["status"] = ConfigErrorStatus("configmap \"settings\" not found");
  EXPECT_TRUE(Created(Reconcile(w.in)).empty());
}

// Only the kubelet's words for our Secret missing make it again: a ConfigMap of the Secret's
// name (a tenant's template may ask for one), or a message that quotes the name, is not the
// Secret gone. Before, any "not found" message quoting "<job>-rendezvous" made a new key and
// restarted the gang, pass after pass while the message stayed.
TEST(Reconcile, OnlyTheSecretsOwnNotFoundMessageMakesItAgain) {
  World w;
  w.Running();
  RecordKey(w.in.job, "old");
  for (auto& p : w.in.pods) p = WithKeyHash(p, "old");
  w.in.new_rendezvous_key = "new";
  for (const char* message :
       {"configmap \"mnist-rendezvous\" not found", "configmaps \"mnist-rendezvous\" not found",
        "secret \"settings\" not found (see \"mnist-rendezvous\")",
        "secret \"mnist-rendezvous-uid1-extra\" not found",
        "secret \"mnist-rendezvous\" not found"}) {
    w.in.pods[1]["status"] = ConfigErrorStatus(message);
    Decision d = Reconcile(w.in);
    EXPECT_TRUE(Created(d).empty()) << message;
    EXPECT_FALSE(d.job_restarted) << message;
    EXPECT_EQ(FindEvent(d, "RendezvousSecretMissing"), nullptr) << message;
  }
  // The kubelet's and the API server's words for it are.
  for (const char* message :
       {"secret \"mnist-rendezvous-uid1\" not found",
        "container tj, env TJ_RENDEZVOUS_KEY: secrets \"mnist-rendezvous-uid1\" "
        "not found"}) {
    w.in.pods[1]["status"] = ConfigErrorStatus(message);
    EXPECT_EQ(Created(Reconcile(w.in)), (std::vector<std::string>{"secrets/mnist-rendezvous-uid1"}))
        << message;
  }
}

}  // namespace
}  // namespace tj::controller
