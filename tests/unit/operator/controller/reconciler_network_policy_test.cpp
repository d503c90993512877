// The job's NetworkPolicy (operator/controller/reconciler_network_policy.cpp): made with the
// job's Service and Secret, before its pods; made again when it goes; after a refusal, asked
// again only once the retry time has passed, and the job goes on meanwhile.
#include <gtest/gtest.h>

#include <algorithm>

#include "operator/controller/reconciler.h"
#include "tests/unit/operator/controller/reconciler_world.h"

namespace tj::controller {
namespace {

ReconcilerOptions WithPolicies() {
  ReconcilerOptions o;
  o.network_policy = NetworkPolicySettings{"tj-system", {{"app.kubernetes.io/name", "tj"}}};
  return o;
}

bool CreatesPolicy(const Decision& d) {
  const auto c = Created(d);
  return std::find(c.begin(), c.end(), "networkpolicies/mnist-pods") != c.end();
}

// The job's status after the executor was refused its policy at `at`.
void Refused(World& w, kube::WallTime at) {
  api::TrainingJobStatus st = api::TrainingJobStatus::FromJson(w.in.job["status"]);
  st.SetCondition(api::condition::kNetworkPolicyRefused, true, "NetworkPolicyRefused",
                  "the API server refused NetworkPolicy ns/mnist-pods: forbidden", at);
  w.in.job["status"] = st.ToJson();
}

TEST(ReconcileNetworkPolicy, ANewJobGetsItsPolicyBeforeItsPods) {
  World w;
  const Decision d = Reconcile(w.in, WithPolicies());
  const auto c = Created(d);
  const auto policy = std::find(c.begin(), c.end(), "networkpolicies/mnist-pods");
  ASSERT_NE(policy, c.end());
  const auto first_pod = std::find_if(
      c.begin(), c.end(), [](const std::string& s) { return s.rfind("pods/", 0) == 0; });
  ASSERT_NE(first_pod, c.end());
  EXPECT_LT(policy, first_pod);  // the pods never listen unprotected
  for (const auto& a : d.actions) {
    if (a.kind == Action::Kind::kCreate && a.resource.plural == "networkpolicies") {
      EXPECT_EQ(a.resource.api_version, "networking.k8s.io/v1");
      EXPECT_TRUE(IsOwnedBy(a.object, w.in.job));
      EXPECT_EQ(a.object["spec"]["podSelector"]["matchLabels"]["tjo.dev/job-name"], "mnist");
    }
  }
}

TEST(ReconcileNetworkPolicy, NoneWithoutTheOption) {
  World w;
  const Decision d = Reconcile(w.in);
  EXPECT_FALSE(CreatesPolicy(d));
  EXPECT_EQ(StatusOf(d).Find(api::condition::kNetworkPolicyRefused), nullptr);
}

// The operator ran with --network-policy, was refused, and runs without it now.
TEST(ReconcileNetworkPolicy, ARefusalTurnsFalseOnceTheOptionIsOff) {
  World w;
  w.Running();
  Refused(w, kT0);
  const Decision d = Reconcile(w.in);
  EXPECT_FALSE(CreatesPolicy(d));
  const api::Condition& c = Cond(d, api::condition::kNetworkPolicyRefused);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "NetworkPolicyOff");
}

TEST(ReconcileNetworkPolicy, MadeAgainWhenItGoesAndLeftAloneWhileItIsThere) {
  World w;
  w.Running();
  w.in.network_policy = json::object();
  const Decision there = Reconcile(w.in, WithPolicies());
  EXPECT_FALSE(CreatesPolicy(there));
  EXPECT_TRUE(Created(there).empty());
  w.in.network_policy.reset();  // deleted by someone
  const Decision gone = Reconcile(w.in, WithPolicies());
  EXPECT_TRUE(CreatesPolicy(gone));
  EXPECT_EQ(Created(gone).size(), 1u);  // nothing else: the gang runs on
  EXPECT_TRUE(Deleted(gone).empty());
}

TEST(ReconcileNetworkPolicy, ARefusalIsAskedAgainOnlyAfterTheRetryTimeAndTheJobRunsMeanwhile) {
  World w;
  Refused(w, kT0);
  w.in.now = kT0 + seconds(10);
  const Decision soon = Reconcile(w.in, WithPolicies());
  EXPECT_FALSE(CreatesPolicy(soon));
  // The job is not held back: its Service, Secret and pods are created.
  const auto c = Created(soon);
  EXPECT_EQ(std::count_if(c.begin(), c.end(),
                          [](const std::string& s) { return s.rfind("pods/", 0) == 0; }),
            3);
  ASSERT_TRUE(soon.requeue_after.has_value());
  EXPECT_LE(*soon.requeue_after, seconds(50) + milliseconds(1));
  EXPECT_EQ(Cond(soon, api::condition::kNetworkPolicyRefused).status, "True");

  w.in.now = kT0 + seconds(60);
  EXPECT_TRUE(CreatesPolicy(Reconcile(w.in, WithPolicies())));
}

TEST(ReconcileNetworkPolicy, TheRefusalConditionTurnsFalseOnceThePolicyExists) {
  World w;
  w.Running();
  Refused(w, kT0);
  w.in.network_policy = json::object();  // granted and made since
  const Decision d = Reconcile(w.in, WithPolicies());
  const api::Condition& c = Cond(d, api::condition::kNetworkPolicyRefused);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "NetworkPolicyCreated");
  EXPECT_FALSE(CreatesPolicy(d));
}

TEST(ReconcileNetworkPolicy, ARunningJobWithItsPolicyWritesNoConditionForIt) {
  World w;
  w.Running();
  w.in.network_policy = json::object();
  const Decision d = Reconcile(w.in, WithPolicies());
  EXPECT_EQ(StatusOf(d).Find(api::condition::kNetworkPolicyRefused), nullptr);
}

TEST(ReconcileNetworkPolicy, ASuspendedOrFinishedJobGetsNone) {
  World w;
  w.in.job["spec"]["runPolicy"]["suspend"] = true;
  EXPECT_FALSE(CreatesPolicy(Reconcile(w.in, WithPolicies())));
  World f;
  f.Running();
  api::TrainingJobStatus st = api::TrainingJobStatus::FromJson(f.in.job["status"]);
  st.SetCondition(api::condition::kSucceeded, true, "JobSucceeded", "done", kT0);
  f.in.job["status"] = st.ToJson();
  EXPECT_FALSE(CreatesPolicy(Reconcile(f.in, WithPolicies())));
}

}  // namespace
}  // namespace tj::controller
