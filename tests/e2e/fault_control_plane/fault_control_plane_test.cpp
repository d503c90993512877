// Control-plane faults on the local cluster (label `fault`): the operator SIGKILLed at three
// moments of one job (right after the job's creation, once its pods exist, mid-training),
// the API server restarted mid-job, etcd compacted mid-job so that every watch must list
// again, and the node agent killed (its pods are adopted) or stopped (its pods end and the
// gang restarts from its backup) mid-job. Each job ends Succeeded with final weights bitwise
// equal to those of the same job run without faults, creates no object twice, and leaves no
// trainer process behind.
//
// Training is paced with the trainer's failpoint backup.before_rename=sleep:<ms> (see
// common/failpoint.h) so that a fault struck after the first backup lands mid-training.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kube/informer.h"
#include "tests/e2e/support/e2e_support.h"
#include "tests/support/temp_dir.h"

namespace tj::kube {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::Eventually;
using testing::Kubectl;
using testing::OperatorProcess;
using testing::TrainerPids;
using tj::testing::ReadBytes;

// Each backup write held this long (see PaceFailpoint): long enough for a fault to land in
// training.
constexpr int kPaceMs = 700;
const std::string kPace = testing::PaceFailpoint(kPaceMs);

constexpr char kJob[] = "fmnist";
constexpr char kChief[] = "fmnist-worker-0";  // no Chief replica: worker 0 is the chief
const seconds kStartTimeout(240);             // from creation to the first backup
const seconds kFinishTimeout(480);            // from the fault to the end, restarts included

// Every uid the API server ever gave to an object of a kind, by name, as seen by a watch
// (an informer) from before the job exists: an object created twice shows two uids.
class CreationRecorder {
 public:
  CreationRecorder(Client* client, const std::string& ns) {
    for (const Resource& r : {resources::kPods, resources::kServices, resources::kSecrets}) {
      InformerOptions o;
      o.resource = r;
      o.ns = ns;
      auto informer = std::make_unique<Informer>(client, RealClock::Get(), o);
      const std::string kind = r.plural;
      informer->AddHandlers({[this, kind](const json& obj) { Record(kind, obj); },
                             [this, kind](const json&, const json& obj) { Record(kind, obj); },
                             {}});
      informer->Start();
      informers_.push_back(std::move(informer));
    }
    for (auto& i : informers_) EXPECT_TRUE(i->WaitForSync(std::chrono::seconds(30)));
  }
  ~CreationRecorder() {
    for (auto& i : informers_) i->Stop();
  }

  // "<kind>/<name>: n uids" for each object that had more than one; empty when none did.
  std::vector<std::string> Duplicates() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const auto& [key, uids] : uids_) {
      if (uids.size() > 1) out.push_back(key + ": " + std::to_string(uids.size()) + " uids");
    }
    return out;
  }
  size_t Count(const std::string& kind) const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [key, uids] : uids_) n += key.rfind(kind + "/", 0) == 0;
    return n;
  }

 private:
  void Record(const std::string& kind, const json& obj) {
    const json md = obj.value("metadata", json::object());
    // Only the job's objects: not the namespace's default token Secret or root CA.
    bool owned = false;
    for (const auto& ref : md.value("ownerReferences", json::array())) {
      owned = owned || ref.value("kind", "") == "TrainingJob";
    }
    if (!owned) return;
    std::lock_guard<std::mutex> lock(mu_);
    uids_[kind + "/" + md.value("name", "")].insert(md.value("uid", ""));
  }

  mutable std::mutex mu_;
  std::map<std::string, std::set<std::string>> uids_;  // GUARDED_BY(mu_)
  std::vector<std::unique_ptr<Informer>> informers_;
};

class FaultControlPlane : public testing::JobTest {
 protected:
  // The fault job, paced so that a fault struck after the first backup lands mid-training.
  static json PacedJob() { return testing::FaultJob(kPace); }

  // The final weights digest of the fault job run without faults (the pace changes no result).
  std::string ReferenceSha() {
    return JobTest::ReferenceSha(testing::FaultJob(""), kFinishTimeout);
  }

  // Waits for the chief's first backup: training is under way and far from over.
  void WaitMidTraining() {
    ASSERT_TRUE(
        Eventually([&] { return !PodEvents(kChief, "backup_saved").empty(); }, kStartTimeout))
        << PodLog(kChief) << Kubectl(cluster_, "-n " + ns_ + " get tj,pods");
  }

  // Kills the operator (SIGKILL: no cleanup, no lease release) and starts a new one.
  void KillAndRestartOperator() {
    op_->Stop(SIGKILL);
    op_ = std::make_unique<OperatorProcess>(cluster_, ns_, log_path_, /*keep_previous_log=*/true);
    ++operator_kills_;
  }

  int operator_kills_ = 0;
};

TEST_F(FaultControlPlane, UninterruptedRunIsTheReference) { EXPECT_EQ(ReferenceSha().size(), 64u); }

TEST_F(FaultControlPlane, OperatorKilledThreeTimesMidReconcileCreatesNothingTwice) {
  const std::string reference = ReferenceSha();  // before the recorder: not its objects
  CreationRecorder recorder(client_.get(), ns_);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, PacedJob()).ok());
  // 1. Right after the job's creation: the operator has just seen it, or is creating its
  // Service, Secret and pods.
  KillAndRestartOperator();
  // 2. Once the first pod exists: creating or about to report the rest.
  ASSERT_TRUE(Eventually([&] { return recorder.Count("pods") >= 1; }, kStartTimeout)) << op_->Log();
  KillAndRestartOperator();
  // 3. Mid-training.
  ASSERT_NO_FATAL_FAILURE(WaitMidTraining());
  KillAndRestartOperator();
  ExpectSucceededWithReferenceWeights(kJob, kChief, reference, 0, kFinishTimeout,
                                      /*expect_no_trainer_left=*/true);
  EXPECT_EQ(operator_kills_, 3);
  EXPECT_TRUE(recorder.Duplicates().empty()) << ::testing::PrintToString(recorder.Duplicates());
  EXPECT_EQ(recorder.Count("pods"), 3u);  // two workers and the evaluator, once each
  EXPECT_EQ(recorder.Count("services"), 1u);
  EXPECT_EQ(recorder.Count("secrets"), 1u);
}

TEST_F(FaultControlPlane, ApiServerRestartedMidJob) {
  const std::string reference = ReferenceSha();
  CreationRecorder recorder(client_.get(), ns_);
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, PacedJob()).ok());
  ASSERT_NO_FATAL_FAILURE(WaitMidTraining());
  ASSERT_TRUE(cluster_->RestartApiServer().ok());
  ExpectSucceededWithReferenceWeights(kJob, kChief, reference, 0, kFinishTimeout,
                                      /*expect_no_trainer_left=*/true);
  EXPECT_TRUE(recorder.Duplicates().empty()) << ::testing::PrintToString(recorder.Duplicates());
}

TEST_F(FaultControlPlane, EtcdCompactedMidJobWatchesListAgain) {
  const std::string reference = ReferenceSha();
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, PacedJob()).ok());
  ASSERT_NO_FATAL_FAILURE(WaitMidTraining());
  // Writes elsewhere move etcd's revision past every version the operator's watches hold;
  // compaction removes that history from etcd and a restart empties the API server's watch
  // cache: resuming a watch is answered 410 Gone, and only a new list recovers.
  std::string other = testing::NewNamespace(client_.get(), "compaction-writes");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client_
                    ->Create(resources::kConfigMaps, other,
                             {{"apiVersion", "v1"},
                              {"kind", "ConfigMap"},
                              {"metadata", {{"name", "w" + std::to_string(i)}}}})
                    .ok());
  }
  ASSERT_TRUE(cluster_->CompactEtcd().ok());
  ASSERT_TRUE(cluster_->RestartApiServer().ok());
  EXPECT_TRUE(
      Eventually([&] { return op_->Log().find("410 Gone") != std::string::npos; }, seconds(120)))
      << "the operator's log shows no watch that had to list again:\n"
      << op_->Log();
  ExpectSucceededWithReferenceWeights(kJob, kChief, reference, 0, kFinishTimeout,
                                      /*expect_no_trainer_left=*/true);
}

TEST_F(FaultControlPlane, NodeAgentKilledMidJobAdoptsThePods) {
  const std::string reference = ReferenceSha();
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, PacedJob()).ok());
  ASSERT_NO_FATAL_FAILURE(WaitMidTraining());
  const std::vector<pid_t> before = TrainerPids(ns_);
  ASSERT_GE(before.size(), 2u);  // the workers (and the evaluator, when it has a TF_CONFIG)
  auto restarted = cluster_->Script("restart-node");  // SIGKILL, as a crash
  ASSERT_TRUE(restarted.ok()) << restarted.status().message();
  // The trainers lived through it (those that had not finished meanwhile are the same).
  for (pid_t pid : TrainerPids(ns_)) {
    EXPECT_NE(std::find(before.begin(), before.end(), pid), before.end())
        << "tj-trainer " << pid << " was started again";
  }
  ExpectSucceededWithReferenceWeights(kJob, kChief, reference, 0, kFinishTimeout,
                                      /*expect_no_trainer_left=*/true);
  EXPECT_NE(ReadBytes(cluster_->dir() + "/logs/tj-process-node.log").find("container_adopted"),
            std::string::npos);
}

TEST_F(FaultControlPlane, NodeAgentStoppedMidJobRestartsTheGangFromItsBackup) {
  const std::string reference = ReferenceSha();
  ASSERT_TRUE(client_->Create(api::kTrainingJobs, ns_, PacedJob()).ok());
  ASSERT_NO_FATAL_FAILURE(WaitMidTraining());
  // SIGTERM: a node shutdown. The agent stops the pods; the next one reports them ended
  // (143) and the operator restarts the gang, which resumes from its last backup.
  auto restarted = cluster_->Script("restart-node --graceful");
  ASSERT_TRUE(restarted.ok()) << restarted.status().message();
  ExpectSucceededWithReferenceWeights(kJob, kChief, reference, 1, kFinishTimeout,
                                      /*expect_no_trainer_left=*/true);
  EXPECT_FALSE(PodEvents(kChief, "restored").empty()) << PodLog(kChief);
}

}  // namespace
}  // namespace tj::kube
