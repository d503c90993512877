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
//     "cpu_target": "avx2",         // the CPU kernels' SIMD target   (informational)
//     "epoch": 2,                   // the epoch in progress (1-based) or the last one done
//     "total_epochs": 3,
//     "step": 120,                  // steps done in the epoch in progress
//     "global_step": 420,           // optimizer steps done in all
//     "loss": 0.41, "accuracy": 0.85, "images_per_sec": 1180.5,   // the last epoch's, or null
//     "last_backup": {"epoch": 2, "step": 100, "global_step": 400}, // the newest backup, or null
//     "evaluation": {"checkpoint": "ckpt-2", "epoch": 2,           // the evaluator's newest
//                    "loss": 0.42, "accuracy": 0.84}               // result, or null
//   }
//
// Every field is optional; the operator reads epoch, total_epochs, step, global_step (counts:
// integers in [0, 2^31)), loss, accuracy, images_per_sec (numbers),
// last_backup.{epoch,step,global_step} (counts) from
// the chief (else worker 0), and evaluation.{checkpoint (text), epoch, loss, accuracy} from the
// evaluator. A field of another type is ignored; a whole answer over kMaxBytes, nested deeper
// than kMaxNesting, not a JSON object, or not complete within the operator's timeout is ignored.
#pragma once

#include <cstddef>

namespace tj::status_schema {

// What a field's value must be for the operator to copy it; a value of another kind is ignored.
enum class Kind {
  kInfo,    // informational: not copied
  kCount,   // an integer in [0, 2^31)
  kNumber,  // any JSON number
  kText,    // a string of at most kMaxTextBytes bytes
  kObject,  // an object of the fields named beside it
};

// One field of the document: its key, and the kind of value the operator copies.
struct Field {
  const char* key;
  Kind kind;
};

inline constexpr Field kRole{"role", Kind::kInfo};
inline constexpr Field kState{"state", Kind::kInfo};
inline constexpr Field kCpuTarget{"cpu_target",
                                  Kind::kInfo};  // avx512 | avx2 | sse4 | neon | scalar
inline constexpr Field kEpoch{"epoch", Kind::kCount};
inline constexpr Field kTotalEpochs{"total_epochs", Kind::kCount};
inline constexpr Field kStep{"step", Kind::kCount};
inline constexpr Field kGlobalStep{"global_step", Kind::kCount};
inline constexpr Field kLoss{"loss", Kind::kNumber};
inline constexpr Field kAccuracy{"accuracy", Kind::kNumber};
inline constexpr Field kImagesPerSec{"images_per_sec", Kind::kNumber};
inline constexpr Field kLastBackup{"last_backup", Kind::kObject};  // {kEpoch, kStep}
inline constexpr Field kEvaluation{"evaluation", Kind::kObject};   // {kCheckpoint, kEpoch, ...}
inline constexpr Field kCheckpoint{"checkpoint", Kind::kText};

// What the operator accepts of one answer.
inline constexpr size_t kMaxBytes = size_t{64} * 1024;
inline constexpr size_t kMaxNesting = 8;
inline constexpr size_t kMaxTextBytes = 256;  // a text field (evaluation.checkpoint)

}  // namespace tj::status_schema
