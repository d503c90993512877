// The trainer's last word to Kubernetes: where a restarted gang resumes. A chief that stops
// (a SIGTERM on eviction, preemption or a Kueue drain, a lost peer, an error) writes the
// backup it ended with as its container's termination message; the kubelet copies it into
// the pod's status (state.terminated.message), where the operator reads it into the job's
// status.progress.lastBackup and the Kueue Workload's annotations, so that the status names
// the step the next gang restores, not whatever the last /status poll saw.
//
//   {"lastBackup": {"epoch": 3, "step": 236, "time": "2026-11-27T19:40:52.123Z"}}
//
// (`time`: when the backup was durable.) The kubelet keeps at most 4096 bytes of it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"

namespace tj::train {

// Where the message goes: $TJ_TERMINATION_MESSAGE_PATH, else the kubelet's default
// /dev/termination-log.
std::string TerminationMessagePath();

// Writes {"lastBackup": last_backup} (its epoch, step and time) to `path`. The file must
// exist already (the kubelet makes it; nothing is created outside a pod) and be a regular
// file: otherwise, and without a backup, nothing is written and Ok is returned. An error only
// when the file is there and cannot be written.
Status WriteTerminationMessage(const std::optional<nlohmann::json>& last_backup,
                               const std::string& path);

}  // namespace tj::train
