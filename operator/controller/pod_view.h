// What the operator reads of one of its pods, parsed once from the API server's JSON. The
// reconciler's rules, the cause of a pod's end (restart_cause.h) and the executor's /status
// reads see pods only through this view, never as raw fields. The informer's cache keeps a
// trimmed pod (cache_transforms.h); pod_view_test checks that the view of a trimmed pod equals
// the view of the whole one, so the two cannot disagree on what is kept.
//
// A pod's status is written by a kubelet and its spec by a tenant: a field that is missing or
// of another type reads as absent, never throws.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kube/time_format.h"
#include "operator/api/training_job.h"
#include "operator/controller/node_view.h"

namespace tj::controller {

// A container the kubelet has not started (state.waiting).
struct WaitingContainer {
  std::string reason;   // ImagePullBackOff, CreateContainerConfigError, ...
  std::string message;  // the kubelet's words, e.g. secret "mnist-rendezvous" not found
  bool operator==(const WaitingContainer&) const = default;
};

// How the trainer container ended (state.terminated).
struct TerminatedContainer {
  std::optional<int> exit_code;
  std::string reason;  // Error, Completed, OOMKilled, ...
  std::optional<kube::WallTime> finished_at;
  // The backup the trainer ended with, from its termination message
  // ({"lastBackup": {"epoch", "step", "time"}}, trainer/train/termination_message.h): an
  // object {epoch, step, time} of a count, a count and a time; null when the message says
  // none or is not of that shape (a program's own message, the tenant's bytes).
  nlohmann::json last_backup;
  bool operator==(const TerminatedContainer&) const = default;
};

struct PodView {
  // metadata
  std::string name;
  std::string uid;
  bool being_deleted = false;  // deletionTimestamp is set
  // When its deletion was asked for: deletionTimestamp less deletionGracePeriodSeconds.
  std::optional<kube::WallTime> deleted_at;
  // deletionTimestamp itself: when its grace period ends and its kubelet kills what still runs.
  std::optional<kube::WallTime> grace_ends;
  std::optional<kube::WallTime> created;
  std::optional<api::ReplicaType> replica_type;  // tjo.dev/replica-type
  int replica_index = -1;                        // tjo.dev/replica-index; -1: absent or not a count
  int probe_index = -1;  // tjo.dev/capacity-probe: the worker an elastic job's probe stands for
  int gang = -1;         // tjo.dev/restart-count: the gang it belongs to
  std::string key_hash;  // of the rendezvous key it was started with
  bool restarts_in_place = false;  // labelled kLabelRestartInPlace=true (job_resources.h)
  // spec: its TF_CONFIG container's name (TrainerContainerIndex; "" when none) and /status port
  // (StatusPortOf)
  std::string trainer_container;
  std::optional<int> status_port;
  std::string node_name;                // spec.nodeName: the node it is bound to ("": none yet)
  std::vector<Toleration> tolerations;  // spec.tolerations
  // status
  std::string phase = "Pending";  // Pending when the kubelet has not said
  std::string reason;             // status.reason: Evicted, Preempting, Shutdown, ...
  std::string pod_ip;
  // The scheduler's reason for a pending pod (PodScheduled=False): "reason: message".
  std::string unschedulable;
  // The reason of a True DisruptionTarget condition (Kubernetes 1.26+): who deletes the pod.
  std::string disruption;
  // Every container the kubelet has not started, in the order of containerStatuses.
  std::vector<WaitingContainer> waiting;
  // The TF_CONFIG container's state (found as TrainerContainerIndex finds it in the spec).
  std::optional<WaitingContainer> trainer_waiting;
  std::optional<TerminatedContainer> trainer_terminated;
  // The TF_CONFIG container's restartCount: restarts in place (the kubelet's, by the
  // restartPolicyRules BuildPod gives a gang pod where the server allows it).
  int trainer_restarts = 0;

  // Pending, Running or Unknown, and not being deleted.
  bool Active() const;
  // Why the pod is not running yet: its trainer container's waiting reason (ImagePullBackOff,
  // ...), else the scheduler's (a claim that does not exist: "Unschedulable: 0/1 nodes are
  // available: 1 persistentvolumeclaim \"data\" not found."), else "".
  std::string PendingReason() const;

  bool operator==(const PodView&) const = default;
};

PodView ViewOfPod(const nlohmann::json& pod);

// spec.nodeName: the node the pod is bound to; "" when none (or not a string). PodView's
// node_name, for those that read a raw pod (the node index of the pod cache).
std::string NodeNameOf(const nlohmann::json& pod);

}  // namespace tj::controller
