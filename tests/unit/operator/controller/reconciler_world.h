// What the reconciler's tests share: a job (ns/mnist: two workers and an evaluator), pods as the
// operator would have created them, a World whose gang runs, and readers of a Decision (what it
// creates and deletes, its events, its status and conditions, checked against the API
// conventions on every read).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler.h"

namespace tj::controller {

using api::ReplicaType;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline const kube::WallTime kT0 = kube::WallTime(seconds(1700000000));

inline json Template() {
  return {{"spec",
           {{"containers", json::array({{{"name", "trainer"},
                                         {"image", "tj-trainer"},
                                         {"args", json::array({"--epochs", "2"})}}})}}}};
}

inline json Job(int workers = 2, bool evaluator = true) {
  json j = {{"apiVersion", "tjo.dev/v1alpha1"},
            {"kind", "TrainingJob"},
            {"metadata", {{"name", "mnist"}, {"namespace", "ns"}, {"uid", "uid-1"}}},
            {"spec",
             {{"replicaSpecs", {{"Worker", {{"replicas", workers}, {"template", Template()}}}}}}}};
  if (evaluator)
    j["spec"]["replicaSpecs"]["Evaluator"] = {{"replicas", 1}, {"template", Template()}};
  return j;
}

// A pod as the operator would have created it, in `phase`.
inline json Pod(const json& job, ReplicaType t, int i, int gang, const std::string& phase,
                std::optional<int> exit_code = std::nullopt) {
  auto spec = api::ParseSpec(job["spec"]);
  json p = BuildPod(job, *spec, t, i, gang);
  p["metadata"]["creationTimestamp"] = kube::FormatTime(kT0);
  p["status"] = {{"phase", phase}, {"podIP", "127.0.1." + std::to_string(i + 1)}};
  if (exit_code) {
    p["status"]["containerStatuses"] =
        json::array({{{"name", "trainer"},
                      {"state",
                       {{"terminated",
                         {{"exitCode", *exit_code},
                          {"reason", *exit_code == 0 ? "Completed" : "Error"},
                          {"finishedAt", kube::FormatTime(kT0)}}}}}}});
  }
  return p;
}

// A job whose whole gang (number `gang`) and evaluator run, with status to match.
struct World {
  json job = Job();
  Observed in;
  World() {
    in.job = job;
    in.now = kT0;
    in.new_rendezvous_key = "k";
  }
  void Running(int gang = 0) {
    json st = {{"restartCount", gang},
               {"createdGeneration", gang},
               {"rendezvousKeyHash", KeyHash("k")},
               {"startTime", kube::FormatTime(kT0)},
               {"conditions", json::array({{{"type", "Created"},
                                            {"status", "True"},
                                            {"reason", "JobCreated"},
                                            {"message", "created"},
                                            {"lastTransitionTime", kube::FormatTime(kT0)}}})}};
    in.job["status"] = st;
    in.service = json::object();
    in.pods = {Pod(in.job, ReplicaType::kWorker, 0, gang, "Running"),
               Pod(in.job, ReplicaType::kWorker, 1, gang, "Running")};
    if (in.job["spec"]["replicaSpecs"].contains("Evaluator")) {
      in.pods.push_back(Pod(in.job, ReplicaType::kEvaluator, 0, 0, "Running"));
    }
  }
  // Applies a decision's status to the job, as the executor would.
  void Keep(const Decision& d) {
    if (d.status) in.job["status"] = *d.status;
  }
};

// The options of passes that judge a gang's failure at once, without waiting for its other
// pods to end (no settle time): what the tables of failures and budgets test. The wait itself
// is FirstFailure.* in reconciler_gang_test.cpp.
inline ReconcilerOptions JudgedAtOnce() {
  ReconcilerOptions o;
  o.failure_settle = milliseconds(0);
  return o;
}

inline std::vector<std::string> Created(const Decision& d) {
  std::vector<std::string> out;
  for (const auto& a : d.actions) {
    if (a.kind == Action::Kind::kCreate) out.push_back(a.resource.plural + "/" + a.name);
  }
  return out;
}
inline std::vector<std::string> Deleted(const Decision& d) {
  std::vector<std::string> out;
  for (const auto& a : d.actions) {
    if (a.kind == Action::Kind::kDelete) out.push_back(a.name);
  }
  return out;
}
inline const Action* FindEvent(const Decision& d, const std::string& reason) {
  for (const auto& a : d.actions) {
    if (a.kind == Action::Kind::kEvent && a.reason == reason) return &a;
  }
  return nullptr;
}
// Kubernetes' API conventions for conditions, checked on every status a test reads: a CamelCase
// reason (metav1.Condition's pattern), True or False, and the time of the last transition.
inline void ExpectConventionalConditions(const json& status) {
  if (!status.contains("conditions")) return;
  static const std::regex kCamelCase("^[A-Z][A-Za-z0-9]*$");
  for (const json& c : status["conditions"]) {
    EXPECT_TRUE(std::regex_match(c.value("reason", ""), kCamelCase)) << c.dump();
    EXPECT_TRUE(c["status"] == "True" || c["status"] == "False") << c.dump();
    EXPECT_TRUE(c.contains("lastTransitionTime")) << c.dump();
    EXPECT_TRUE(c.contains("message")) << c.dump();
  }
}
inline api::TrainingJobStatus StatusOf(const Decision& d) {
  if (d.status) ExpectConventionalConditions(*d.status);
  return api::TrainingJobStatus::FromJson(d.status.value_or(json::object()));
}
inline const api::Condition& Cond(const Decision& d, const std::string& type) {
  static api::Condition none;
  static thread_local api::TrainingJobStatus s;
  s = StatusOf(d);
  const api::Condition* c = s.Find(type);
  return c ? *c : none;
}

}  // namespace tj::controller
