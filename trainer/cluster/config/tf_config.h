// TF_CONFIG, the cluster description TensorFlow's MultiWorkerMirroredStrategy reads, parsed
// and validated, and the roles derived from it exactly as TensorFlow derives them
// (tensorflow/python/distribute/multi_worker_util.py): the `chief` task is the chief, else
// worker 0; evaluators take no part in the collective; parameter servers are not supported.
// Also the address this pod listens on (TJ_POD_IP), the other thing the pod's environment
// says about its place in the cluster.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "trainer/cluster/config/host_port.h"

namespace tj::cluster {

enum class TaskType { kChief, kWorker, kPs, kEvaluator };

// "chief", "worker", "ps", "evaluator".
std::string_view TaskTypeName(TaskType type);

// A validated TF_CONFIG. Plain value; immutable after parsing in practice.
struct TfConfig {
  // The cluster, by task type, as "host:port" strings in TF_CONFIG order.
  std::vector<std::string> chief;
  std::vector<std::string> worker;
  std::vector<std::string> ps;
  std::vector<std::string> evaluator;
  // This process's task. Never kPs (ParseTfConfig rejects it).
  TaskType task_type = TaskType::kWorker;
  int task_index = 0;

  // The chief: the `chief` task, else worker 0. Only the chief writes checkpoints and serves
  // the rendezvous.
  bool is_chief() const;
  bool is_evaluator() const { return task_type == TaskType::kEvaluator; }
  // Chief and workers train together; the evaluator does not.
  bool in_collective() const { return !is_evaluator(); }

  // Number of processes in the collective: chief (0 or 1) + workers.
  int collective_size() const;
  // This task's rank in the collective: the chief task is rank 0 and worker i is rank i + 1;
  // without a chief task, worker i is rank i. -1 for the evaluator.
  int rank() const;

  // "host:port" of the chief (the rendezvous server).
  const std::string& chief_address() const;
  // "host:port" of this task.
  // This task's host:port; empty for an evaluator the cluster does not list.
  const std::string& own_address() const;
  // A printable task name: "worker 1", "chief 0", "evaluator 0".
  std::string task_name() const;

  // The task name and address of collective rank `rank` (0 <= rank < collective_size()).
  std::string TaskNameOfRank(int rank) const;
  const std::string& AddressOfRank(int rank) const;
};

// Parses TF_CONFIG as TensorFlow's TFConfigClusterResolver and MultiWorkerMirroredStrategy read
// it: a cluster job is a list of addresses or an object of index -> address (ClusterSpec's two
// forms; the indices must be 0..n-1 here, as the strategy's ranks need); task.index is read as
// Python's int() reads it (an integer, an integral float, a decimal string, true/false).
// Rejects, with a message naming the field and what to do: malformed JSON, a missing or
// malformed `task`, an unknown task type, an index out of range, an address without a port or
// with a bad port, duplicate addresses, more than one chief or evaluator, a cluster without
// chief or worker, and a `ps` task (parameter servers are not supported). `environment`,
// `rpc_layer`, `session_master` and unknown top-level keys are ignored, as TensorFlow does.
// A TF_CONFIG without a cluster (or with an empty one) describes a local run: see
// DescribesLocalRun, which callers check first.
StatusOr<TfConfig> ParseTfConfig(std::string_view json_text);

// True when TF_CONFIG means one local process, as TensorFlow reads it: empty text, or a JSON
// object whose `cluster` is absent or an empty object (TFConfigClusterResolver then gives an
// empty ClusterSpec, and the strategy trains locally).
bool DescribesLocalRun(std::string_view json_text);

// The address this pod's servers (the chief's rendezvous, the status server) listen on: the
// value of TJ_POD_IP, or "" (every interface) when it is unset or empty. On the process node
// pods are processes on one host, each with its own 127.N.x.y address that tj-process-node puts
// in TJ_POD_IP: listening on every interface there, pods of two jobs or two clusters on that
// host would take each other's ports. Kubernetes gives each pod a network of its own and no
// TJ_POD_IP.
std::string PodListenAddress();

}  // namespace tj::cluster
