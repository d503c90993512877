// Elastic gangs (spec.elasticPolicy, docs/elastic.md): the worker count of the current gang,
// and a restart with fewer workers when the scheduler cannot place the whole gang. The next
// restart of any other cause makes the full gang again: the job grows back when the capacity
// has come back. Part of the reconcile pass (reconciler_pass.h).
#include <algorithm>
#include <map>
#include <string>

#include "operator/controller/job_resources.h"
#include "operator/controller/reconciler_pass.h"

namespace tj::controller {

namespace reconcile {

void Pass::SizeTheGang() {
  if (!spec_.elastic) return;
  const api::ElasticPolicy& e = *spec_.elastic;
  const int32_t chiefs = spec_.Replicas(ReplicaType::kChief);
  // The first gang: the Worker replicas (validated by ParseSpec); in Kueue, what it admits
  // (ApplyAssignment takes the gang down to that).
  const int32_t first = observed_.queue ? e.max_replicas : spec_.Replicas(ReplicaType::kWorker);
  int32_t size = status_.elastic_workers.value_or(first);
  // A size the spec (edited since) no longer allows: the first gang's.
  if (size < e.min_replicas || size > e.max_replicas || !e.Trains(size, chiefs)) size = first;
  spec_.replica_specs[ReplicaType::kWorker].replicas = size;
  status_.elastic_workers = size;
}

void Pass::NoteAdmittedSize() {
  if (spec_.elastic) status_.elastic_workers = spec_.Replicas(ReplicaType::kWorker);
}

bool Pass::ShrinkWhenUnschedulable(const Gang& gang, const GangCensus& census) {
  if (!spec_.elastic || !census.missing.empty() || !census.failures.empty()) return false;
  const api::ElasticPolicy& e = *spec_.elastic;
  const int32_t chiefs = spec_.Replicas(ReplicaType::kChief);
  const int32_t size = spec_.Replicas(ReplicaType::kWorker);
  // The gang's pods the scheduler has placed, and the one waiting longest for a node.
  int32_t placed = 0;
  const PodView* waiting = nullptr;
  for (const auto& [replica, pod] : gang.current) {
    if (!pod->node_name.empty()) {
      ++placed;
    } else if (pod->created && (waiting == nullptr || *pod->created < *waiting->created)) {
      waiting = pod;
    }
  }
  if (waiting == nullptr) return false;
  const kube::WallTime deadline =
      *waiting->created + std::chrono::seconds(e.schedule_timeout_seconds);
  if (observed_.now < deadline) {
    RequeueAt(deadline);
    return false;
  }
  // As many workers as there was room for, the chief's place kept; none placed (the gang is
  // scheduled all or nothing): one size down.
  const int32_t room = placed - chiefs;
  const std::optional<int32_t> next =
      e.LargestSizeUpTo(room >= 1 && room < size ? room : size - 1, chiefs);
  if (!next) return false;  // minReplicas reached: the gang waits (startupDeadlineSeconds)
  const std::string why = "pod " + waiting->name + " found no node in " +
                          std::to_string(e.schedule_timeout_seconds) +
                          "s (spec.elasticPolicy.scheduleTimeoutSeconds" +
                          (waiting->unschedulable.empty() ? "" : "; " + waiting->unschedulable) +
                          "), " + std::to_string(placed) + " of the gang's " +
                          std::to_string(size + chiefs) + " pods were placed";
  RestartResized(gang, *next, why);
  return true;
}

bool Pass::GrowWhenThereIsRoom(const Gang& gang, const GangCensus& census) {
  const int32_t size = spec_.Replicas(ReplicaType::kWorker);
  const bool probing = spec_.elastic && size < spec_.elastic->max_replicas && !observed_.queue &&
                       census.missing.empty() && census.failures.empty() &&
                       census.running == census.expected && !census.chief_succeeded &&
                       census.succeeded_workers == 0;
  std::map<int, const PodView*> probes;
  for (const PodView* p : gang.probes) {
    // A probe that ended where the scheduler placed it (an image without `sleep`) has shown
    // the room all the same; one the node refused is made again.
    const bool ended = p->phase == "Failed" || p->phase == "Succeeded";
    const bool refused = ended && p->node_name.empty();
    if (probing && p->probe_index >= size && p->probe_index < spec_.elastic->max_replicas &&
        !p->being_deleted && !refused) {
      probes[p->probe_index] = p;
    } else {
      DeletePod(*p);  // not needed (any more), or refused: made again once it is gone
    }
  }
  if (!probing) return false;
  const api::ElasticPolicy& e = *spec_.elastic;
  int32_t placed = 0;
  for (int i = size; i < e.max_replicas; ++i) {
    auto it = probes.find(i);
    if (it == probes.end()) {
      if (std::none_of(gang.probes.begin(), gang.probes.end(),
                       [i](const PodView* p) { return p->probe_index == i; })) {
        Create(kube::resources::kPods, BuildCapacityProbe(observed_.job, spec_, i));
      }
    } else if (!it->second->node_name.empty()) {
      ++placed;
    }
  }
  const int32_t chiefs = spec_.Replicas(ReplicaType::kChief);
  const std::optional<int32_t> next = e.LargestSizeUpTo(size + placed, chiefs);
  if (!next || *next <= size) return false;
  const std::string why = std::to_string(placed) + " capacity probe" + (placed == 1 ? "" : "s") +
                          " found room for more workers";
  if (RestartResized(gang, *next, why)) {
    for (const auto& [i, p] : probes) DeletePod(*p);  // their room is the new workers'
  }
  return true;
}

bool Pass::RestartResized(const Gang& gang, int32_t workers, const std::string& why) {
  auto budget = ChargeGangRestart(api::RestartCause::kResized, why, /*never_counted=*/true);
  if (!budget) return false;
  RestartGang("restart " + std::to_string(status_.restart_count + 1) + " (" + *budget +
                  "): " + why + "; restarting the gang with " + std::to_string(workers) +
                  " of its " + std::to_string(spec_.elastic->max_replicas) + " workers",
              gang.current, "GangResized");
  status_.elastic_workers = workers;  // RestartGang made the next gang full-size
  return true;
}

void Pass::DeleteCapacityProbes() {
  for (const PodView& p : pods_) {
    if (!p.replica_type && p.probe_index >= 0) DeletePod(p);
  }
}

}  // namespace reconcile

}  // namespace tj::controller
