// The /status document: what a training program serves on $TJ_STATUS_PORT (GET /status, a JSON
// object) and what tj-operator reads from it into the job's status.progress and
// status.evaluation. tj-trainer writes it (trainer/train/progress.cpp); the operator reads it
// (operator/controller: the executor fetches it under the limits below, the reconciler copies
// the fields); any other program may serve it (docs/tfjob.md). One definition for both sides,
// tested end to end in tests/unit/operator/controller/status_schema_test.cpp.
//
//   {
//     "role": "chief",              // chief | worker | evaluator   (informational)
//     "state": "training",          // starting | training | evaluating | succeeded | failed
//     "epoch": 2,                   // the epoch in progress (1-based) or the last one done
//     "total_epochs": 3,
//     "step": 120,                  // steps done in the epoch in progress
//     "global_step": 420,           // optimizer steps done in all
//     "loss": 0.41, "accuracy": 0.85, "images_per_sec": 1180.5,   // the last epoch's, or null
//     "last_backup": {"epoch": 2, "step": 100},                    // the newest backup, or null
//     "evaluation": {"checkpoint": "ckpt-2", "epoch": 2,           // the evaluator's newest
//                    "loss": 0.42, "accuracy": 0.84}               // result, or null
//   }
//
// Every field is optional; the operator reads epoch, total_epochs, step (counts: integers in
// [0, 2^31)), loss, accuracy, images_per_sec (numbers), last_backup.{epoch,step} (counts) from
// the chief (else worker 0), and evaluation.{checkpoint (text), epoch, loss, accuracy} from the
// evaluator. A field of another type is ignored; a whole answer over kMaxBytes, nested deeper
// than kMaxNesting, not a JSON object, or not complete within the operator's timeout is ignored.
#pragma once

#include <cstddef>

namespace tj::status_schema {

inline constexpr char kRole[] = "role";
inline constexpr char kState[] = "state";
inline constexpr char kEpoch[] = "epoch";
inline constexpr char kTotalEpochs[] = "total_epochs";
inline constexpr char kStep[] = "step";
inline constexpr char kGlobalStep[] = "global_step";
inline constexpr char kLoss[] = "loss";
inline constexpr char kAccuracy[] = "accuracy";
inline constexpr char kImagesPerSec[] = "images_per_sec";
inline constexpr char kLastBackup[] = "last_backup";  // {kEpoch, kStep}
inline constexpr char kEvaluation[] = "evaluation";   // {kCheckpoint, kEpoch, kLoss, kAccuracy}
inline constexpr char kCheckpoint[] = "checkpoint";

// What the operator accepts of one answer.
inline constexpr size_t kMaxBytes = size_t{64} * 1024;
inline constexpr size_t kMaxNesting = 8;
inline constexpr size_t kMaxTextBytes = 256;  // a text field (evaluation.checkpoint)

}  // namespace tj::status_schema
