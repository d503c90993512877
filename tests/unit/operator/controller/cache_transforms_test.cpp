#include "operator/controller/cache_transforms.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "operator/controller/job_resources.h"
#include "operator/controller/pod_view.h"
#include "tests/unit/operator/controller/test_job.h"

namespace tj::controller {
namespace {

using nlohmann::json;

TEST(TrimPodForCache, KeepsWhatTheReconcilerReads) {
  const json job = TestJob();
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok());
  json pod = BuildPod(job, *spec, api::ReplicaType::kWorker, 1, 0);
  pod["metadata"]["managedFields"] = json::array({{{"manager", "tj-operator"}}});
  pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z";
  pod["metadata"]["resourceVersion"] = "7";
  const json why_pending = {{"type", "PodScheduled"},
                            {"status", "False"},
                            {"reason", "Unschedulable"},
                            {"message", "0/1 nodes are available"}};
  const json ended = {{"name", "trainer"},
                      {"restartCount", 2},  // restarts in place, which the reconciler counts
                      {"state",
                       {{"terminated",
                         {{"exitCode", 3},
                          {"reason", "Error"},
                          {"finishedAt", "2026-01-01T00:01:00Z"},
                          {"message", "{}"}}}}}};
  json pending_as_sent = why_pending;
  pending_as_sent["lastTransitionTime"] = "2026-01-01T00:00:00Z";
  json ended_as_sent = ended;
  ended_as_sent["ready"] = false;
  json ready = {
      {"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "2026-01-01T00:00:00Z"}};
  json running = {{"name", "sidecar"},
                  {"state", {{"running", {{"startedAt", "2026-01-01T00:00:00Z"}}}}}};
  pod["status"] = {{"phase", "Running"},
                   {"podIP", "127.0.1.2"},
                   {"conditions", json::array({ready, pending_as_sent})},
                   {"containerStatuses", json::array({ended_as_sent, running})}};
  pod["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = true;
  const json full = pod;
  TrimPodForCache(pod);

  EXPECT_FALSE(pod["metadata"].contains("managedFields"));
  for (const char* k : {"name", "namespace", "creationTimestamp", "resourceVersion"}) {
    EXPECT_EQ(pod["metadata"][k], full["metadata"][k]) << k;
  }
  for (const auto& [k, v] : full["metadata"]["labels"].items()) {
    if (k.rfind("tjo.dev/", 0) == 0) {
      EXPECT_EQ(pod["metadata"]["labels"][k], v) << k;
    }
  }
  EXPECT_TRUE(IsOwnedBy(pod, job));
  EXPECT_EQ(StatusPortOf(pod), StatusPortOf(full));  // the status port stays
  ASSERT_TRUE(StatusPortOf(pod).has_value());
  ASSERT_EQ(pod["spec"]["containers"][0]["env"].size(), 1u);  // TF_CONFIG and the rest go
  EXPECT_EQ(pod["spec"]["containers"][0]["env"][0]["name"], "TJ_STATUS_PORT");
  EXPECT_FALSE(pod["spec"].contains("volumes"));
  EXPECT_EQ(pod["status"]["phase"], "Running");
  EXPECT_EQ(pod["status"]["podIP"], "127.0.1.2");
  // How a container ended and why a pod is pending stay; a running container's start time,
  // conditions that say nothing the reconciler reads and an owner's deletion flag go.
  EXPECT_EQ(pod["status"]["containerStatuses"][0], ended);
  EXPECT_EQ(pod["status"]["containerStatuses"][1],
            json({{"name", "sidecar"}, {"state", json::object()}}));
  EXPECT_EQ(pod["status"]["conditions"], json::array({why_pending}));
  EXPECT_FALSE(pod["metadata"]["ownerReferences"][0].contains("blockOwnerDeletion"));
  EXPECT_FALSE(pod["spec"].contains("hostname"));
}

// A template's args, env and labels are copied into every pod it makes: what the cache keeps
// of a pod must not grow with them.
TEST(TrimPodForCache, KeepsNothingThatGrowsWithTheTemplate) {
  json job = TestJob();
  json& tmpl = job["spec"]["replicaSpecs"]["Worker"]["template"];
  json& c = tmpl["spec"]["containers"][0];
  c["args"] = json::array();
  for (int i = 0; i < 2000; ++i) c["args"].push_back("--flag-" + std::to_string(i));
  c["args"][700] = "--status-port";
  c["args"][701] = "9100";
  for (int i = 0; i < 2000; ++i) {
    c["env"].push_back({{"name", "E" + std::to_string(i)}, {"value", "v"}});
    tmpl["metadata"]["labels"]["team-" + std::to_string(i)] = "x";
  }
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  json pod = BuildPod(job, *spec, api::ReplicaType::kWorker, 0, 0);
  const json full = pod;
  TrimPodForCache(pod);
  EXPECT_EQ(StatusPortOf(full), 9100);
  EXPECT_EQ(StatusPortOf(pod), 9100);
  EXPECT_EQ(pod["spec"]["containers"][0]["args"], json::array({"--status-port=9100"}));
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("env"));  // the port is an argument
  EXPECT_EQ(pod["metadata"]["labels"].size(), 4u) << pod["metadata"]["labels"].dump();
  EXPECT_LT(pod.dump().size(), 2000u) << pod.dump();
  // Without --status-port no args stay.
  json no_port = full;
  no_port["spec"]["containers"][0]["args"] = json::array({"--epochs", "1"});
  TrimPodForCache(no_port);
  EXPECT_FALSE(no_port["spec"]["containers"][0].contains("args"));
}

// The reconciler takes the view of the pods it creates from TemplateForView's templates: the
// same view as the pod built from the whole template, for every way a template names the
// status port and its TF_CONFIG container.
TEST(TemplateForView, GivesThePodsViewWithoutTheTemplate) {
  std::vector<json> containers_cases = {
      json::array({{{"name", "trainer"}, {"image", "t"}, {"args", {"--epochs", "2"}}}}),
      json::array({{{"name", "trainer"}, {"args", {"--status-port", "9001", "--x"}}}}),
      json::array({{{"name", "trainer"}, {"args", {"--status-port=9002"}}}}),
      json::array({{{"name", "trainer"},
                    {"env",
                     {{{"name", "TJ_STATUS_PORT"}, {"value", "9003"}},
                      {{"name", "OTHER"}, {"value", "x"}}}}}}),
      json::array({{{"name", "sidecar"}, {"args", {"--status-port", "1"}}},
                   {{"name", "tensorflow"}, {"args", {"--status-port", "9004"}}}}),
      json::array({{{"name", "only"}, {"args", {"--status-port", "9005"}}}}),  // by being alone
  };
  for (const json& containers : containers_cases) {
    json job = TestJob();
    json& tmpl = job["spec"]["replicaSpecs"]["Worker"]["template"];
    tmpl["spec"]["containers"] = containers;
    for (json& c : tmpl["spec"]["containers"]) c["image"] = "tj-trainer";
    tmpl["spec"]["tolerations"] = json::array({{{"key", "gpu"},
                                                {"operator", "Exists"},
                                                {"effect", "NoExecute"},
                                                {"tolerationSeconds", 60}}});
    tmpl["spec"]["nodeName"] = "node-7";
    tmpl["metadata"] = {{"labels", {{"team", "a"}, {"tjo.dev/job-name", "other"}}},
                        {"annotations", {{"big", std::string(1000, 'x')}}}};
    auto spec = api::ParseSpec(job["spec"]);
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    api::TrainingJobSpec light = *spec;
    for (auto& [t, rs] : light.replica_specs) rs.pod_template = TemplateForView(rs.pod_template);
    for (const std::string hash : {"", "sha256:0123456789abcdef"}) {
      const json whole = BuildPod(job, *spec, api::ReplicaType::kWorker, 1, 2, hash);
      const json from_light = BuildPod(job, light, api::ReplicaType::kWorker, 1, 2, hash);
      EXPECT_EQ(ViewOfPod(from_light), ViewOfPod(whole)) << containers.dump();
      EXPECT_EQ(ViewOfPod(whole).status_port, StatusPortOf(whole)) << containers.dump();
    }
  }
}

TEST(CompactTrainingJob, KeepsTemplatesAsTextAndExpandsToTheSameJob) {
  json job = TestJob();
  job["spec"]["replicaSpecs"]["Evaluator"] = job["spec"]["replicaSpecs"]["Worker"];
  for (int i = 0; i < 1000; ++i) {
    job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"].push_back(
        "--x" + std::to_string(i));
  }
  job["status"] = {{"restartCount", 1}};
  const json whole = job;
  job["metadata"]["managedFields"] = json::array({{{"manager", "kubectl"}}});
  CompactTrainingJob(job);
  for (const char* type : {"Worker", "Evaluator"}) {
    const json& rs = job["spec"]["replicaSpecs"][type];
    EXPECT_FALSE(rs.contains("template")) << type;
    ASSERT_TRUE(rs[kCompactTemplateKey].is_string()) << type;
    EXPECT_EQ(json::parse(rs[kCompactTemplateKey].get<std::string>()),
              whole["spec"]["replicaSpecs"][type]["template"]);
  }
  EXPECT_EQ(job["spec"]["replicaSpecs"]["Worker"].value("replicas", 0), 2);
  EXPECT_FALSE(job["metadata"].contains("managedFields"));
  EXPECT_EQ(job["status"], whole["status"]);
  EXPECT_EQ(CompactTemplateBytes(job),
            whole["spec"]["replicaSpecs"]["Worker"]["template"].dump().size() +
                whole["spec"]["replicaSpecs"]["Evaluator"]["template"].dump().size());
  EXPECT_EQ(ExpandTrainingJob(job), whole);

  const json once = job;
  CompactTrainingJob(job);  // a list's items may be transformed twice
  EXPECT_EQ(job, once);
  // A job that is not compact (what tests put in a cache) expands to itself.
  EXPECT_EQ(ExpandTrainingJob(whole), whole);
  EXPECT_EQ(CompactTemplateBytes(whole), 0u);
  // Neither a spec nor templates: nothing to do, nothing thrown.
  for (json odd : {json(), json::object(), json{{"spec", 3}}, json{{"spec", {{"replicaSpecs", 3}}}},
                   json{{"spec", {{"replicaSpecs", {{"Worker", 3}}}}}}}) {
    const json before = odd;
    CompactTrainingJob(odd);
    EXPECT_EQ(odd, before);
    EXPECT_EQ(ExpandTrainingJob(odd), before);
  }
}

TEST(OwnedByATrainingJob, OnlyAControllerReferenceToATrainingJob) {
  auto with_refs = [](json refs) { return json{{"metadata", {{"ownerReferences", refs}}}}; };
  const json ours = {{"apiVersion", "tjo.dev/v1alpha1"},
                     {"kind", "TrainingJob"},
                     {"name", "j"},
                     {"uid", "u"},
                     {"controller", true}};
  EXPECT_TRUE(OwnedByATrainingJob(with_refs(json::array({ours}))));
  EXPECT_FALSE(OwnedByATrainingJob(json{{"metadata", {{"labels", {{"tjo.dev/job-name", "j"}}}}}}));
  json not_controller = ours;
  not_controller["controller"] = false;
  EXPECT_FALSE(OwnedByATrainingJob(with_refs(json::array({not_controller}))));
  json other_kind = ours;
  other_kind["kind"] = "Job";
  EXPECT_FALSE(OwnedByATrainingJob(with_refs(json::array({other_kind}))));
  json other_group = ours;
  other_group["apiVersion"] = "kubeflow.org/v1";
  EXPECT_FALSE(OwnedByATrainingJob(with_refs(json::array({other_group}))));
  EXPECT_FALSE(OwnedByATrainingJob(with_refs("not a list")));
  EXPECT_FALSE(OwnedByATrainingJob(json("not an object")));
}

TEST(KeepIdentity, NamesLabelsAndOwnersOnly) {
  json secret = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata",
                  {{"name", "mnist-rendezvous"},
                   {"namespace", "ns"},
                   {"uid", "u"},
                   {"resourceVersion", "3"},
                   {"labels", {{"tjo.dev/job-name", "mnist"}}},
                   {"ownerReferences", json::array({OwnerReference(TestJob())})},
                   {"managedFields", json::array()}}},
                 {"data", {{"key", "c2VjcmV0"}}}};
  KeepIdentity(secret);
  EXPECT_FALSE(secret.contains("data"));
  EXPECT_FALSE(secret["metadata"].contains("managedFields"));
  EXPECT_EQ(secret["metadata"]["labels"]["tjo.dev/job-name"], "mnist");
  EXPECT_EQ(secret["metadata"]["name"], "mnist-rendezvous");
  EXPECT_EQ(secret["metadata"]["ownerReferences"], json::array({OwnerReference(TestJob())}));
}

// The executor takes a cached Service or Secret of the job's name as the job's only when the
// job owns it: the owner must survive the transform.
TEST(KeepIdentity, KeepsWhoseServiceAndSecretItIs) {
  const json job = TestJob();
  auto spec = api::ParseSpec(job["spec"]);
  ASSERT_TRUE(spec.ok());
  json other = job;
  other["metadata"]["uid"] = "uid-of-a-deleted-job-of-the-same-name";
  for (json o : {BuildService(job, *spec), BuildSecret(job, "k")}) {
    json theirs = o;
    theirs["metadata"]["ownerReferences"] = json::array({OwnerReference(other)});
    KeepIdentity(o);
    KeepIdentity(theirs);
    EXPECT_TRUE(IsOwnedBy(o, job)) << o.dump();
    EXPECT_FALSE(IsOwnedBy(theirs, job)) << theirs.dump();
    EXPECT_TRUE(IsOwnedBy(theirs, other)) << theirs.dump();
  }
}

TEST(OnlyVersionChanged, SkipsVersionOnlyUpdatesButNotResyncsOrRealChanges) {
  json a = {{"metadata", {{"name", "p"}, {"resourceVersion", "1"}}},
            {"status", {{"phase", "Pending"}}}};
  json b = a;
  EXPECT_FALSE(OnlyVersionChanged(a, b));  // a resync: same version
  b["metadata"]["resourceVersion"] = "2";
  EXPECT_TRUE(OnlyVersionChanged(a, b));
  b["status"]["phase"] = "Running";
  EXPECT_FALSE(OnlyVersionChanged(a, b));
  json c = a;
  c["metadata"]["resourceVersion"] = "3";
  c["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_FALSE(OnlyVersionChanged(a, c));
  EXPECT_FALSE(OnlyVersionChanged(a, json()));
}

TEST(OnlyVersionOrConditionsChanged, SkipsTheSchedulersConditionsButNotPhaseOrContainers) {
  json a = {{"metadata", {{"name", "p"}, {"resourceVersion", "1"}}},
            {"status", {{"phase", "Pending"}}}};
  json b = a;
  b["metadata"]["resourceVersion"] = "2";
  b["status"]["conditions"] =
      json::array({{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}}});
  EXPECT_FALSE(OnlyVersionChanged(a, b));             // for Services, Secrets, jobs: a change
  EXPECT_TRUE(OnlyVersionOrConditionsChanged(a, b));  // a condition appeared
  json c = b;
  c["metadata"]["resourceVersion"] = "3";
  c["status"]["conditions"][0]["message"] = "0/1 nodes are available";
  EXPECT_TRUE(OnlyVersionOrConditionsChanged(b, c));   // a condition changed
  EXPECT_FALSE(OnlyVersionOrConditionsChanged(b, b));  // a resync
  json d = c;
  d["metadata"]["resourceVersion"] = "4";
  d["status"]["phase"] = "Running";
  EXPECT_FALSE(OnlyVersionOrConditionsChanged(c, d));
  json e = c;
  e["metadata"]["resourceVersion"] = "5";
  e["status"]["containerStatuses"] = json::array({{{"name", "trainer"}}});
  EXPECT_FALSE(OnlyVersionOrConditionsChanged(c, e));
  json f = c;
  f["metadata"]["resourceVersion"] = "6";
  f["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_FALSE(OnlyVersionOrConditionsChanged(c, f));
}

// The rendezvous key's hash stays (the reconciler compares the pods' with the Secret's), and
// no other annotation does.
TEST(KeyHashAnnotation, KeptOnPodsAndSecretsAloneOfAllAnnotations) {
  nlohmann::json pod = {
      {"metadata",
       {{"name", "p"}, {"annotations", {{kKeyHashAnnotation, "sha256:0011"}, {"big", "x"}}}}}};
  nlohmann::json secret = pod;
  secret["data"] = {{"key", "c2VjcmV0"}};
  TrimPodForCache(pod);
  KeepIdentity(secret);
  for (const auto& o : {pod, secret}) {
    EXPECT_EQ(o["metadata"]["annotations"], (nlohmann::json{{kKeyHashAnnotation, "sha256:0011"}}));
    EXPECT_EQ(KeyHashOf(o), "sha256:0011");
  }
  EXPECT_FALSE(secret.contains("data"));
  nlohmann::json plain = {{"metadata", {{"name", "p"}, {"annotations", {{"big", "x"}}}}}};
  KeepIdentity(plain);
  EXPECT_FALSE(plain["metadata"].contains("annotations"));
}

}  // namespace
}  // namespace tj::controller
