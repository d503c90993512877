#include "trainer/train/training_loop.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "common/clock.h"
#include "common/failpoint.h"
#include "trainer/checkpoint/backup_manager.h"
#include "trainer/checkpoint/checkpoint_manager.h"
#include "trainer/data/epoch_order.h"
#include "trainer/model/graph.h"
#include "trainer/nn/adam.h"
#include "trainer/nn/cpu_step.h"
#include "trainer/nn/model.h"
#include "trainer/train/backup_writer.h"
#include "trainer/train/export.h"
#include "trainer/train/recipe.h"

namespace tj::train {
namespace {

using checkpoint::TrainingState;

// Running sums of the epoch in progress; saved in backups so a resumed run reports the same
// epoch figures as an uninterrupted one.
struct EpochTotals {
  double loss_sum = 0.0;
  double correct = 0.0;
  double images = 0.0;
};

// True when every float of data[0..count) is finite. One pass of integer tests (an exponent
// of all ones is an infinity or a NaN) that the compiler vectorises: 1.4 MB per step, beside a
// step of tens of milliseconds.
bool AllFinite(const float* data, size_t count) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, data + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & kExponent) == kExponent);
  }
  return bad == 0;
}

// "NaN" or "inf" and where: the first non-finite float of data[0..count), for the message.
std::string FirstNonFinite(const float* data, size_t count, const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(data[i])) {
      return what + "[" + std::to_string(i) + "] is " + (std::isnan(data[i]) ? "NaN" : "inf");
    }
  }
  return what + " is finite";
}

// SGD's momentum in a backup (nn::Sgd::momentum).
constexpr const char* kSgdMomentumTensor = "sgd_momentum";

class Trainer {
 public:
  explicit Trainer(const TrainingContext& c)
      : context_(c),
        options_(*c.options),
        model_(c.model),
        idx_(c.dataset),
        data_(c.data),
        train_count_(c.model ? c.data->train->size() : c.dataset->train.count),
        plan_{.batch_per_shard = options_.batch_size,
              .shards = options_.elastic_shards > 0 ? options_.elastic_shards : c.comm->size(),
              .replicas = c.comm->size(),
              .rank = c.comm->rank(),
              .steps_cap = options_.steps_per_epoch},
        eval_step_(options_.batch_size, c.pool, *c.kernels),
        gradient_comm_(c.gradient_comm ? c.gradient_comm : c.comm),
        schedule_(ScheduleOf(options_.recipe)) {
    if (c.backend) {
      backend_ = c.backend;
    } else if (c.model) {
      const int shards = std::max(1, plan_.ShardsPerReplica());
      own_backend_ = MakeDeclaredCpuBackend(
          *c.model, DeclaredInputOf(options_, *data_, plan_), options_.batch_size, c.pool,
          *c.kernels, {.first = plan_.rank * shards, .count = shards, .total = plan_.shards},
          options_.seed, {.recipe = options_.recipe, .total_steps = TotalSteps()});
      backend_ = own_backend_.get();
    } else {
      own_backend_ = MakeCpuBackend(*idx_, options_.batch_size, c.pool, *c.kernels,
                                    std::max(1, plan_.ShardsPerReplica()));
      backend_ = own_backend_.get();
    }
    if (!options_.backup_dir.empty()) {
      backups_ = std::make_unique<checkpoint::BackupManager>(options_.backup_dir, c.log,
                                                             options_.identity);
      if (c.is_chief)
        backup_writer_ = std::make_unique<BackupWriter>(backups_.get(), c.log, c.progress);
    }
    if (!options_.checkpoint_dir.empty())
      checkpoints_ = std::make_unique<checkpoint::CheckpointManager>(
          options_.checkpoint_dir, options_.keep_checkpoints, options_.identity.job_key);
  }

  TrainingOutcome Run();

 private:
  TrainingOutcome PeerLost(const Status& s) {
    return {s.WithContext("collective failed (a peer was lost or timed out; the gang must "
                          "restart and resume from the last backup)"),
            kExitPeerLost};
  }
  TrainingOutcome Failed(const Status& s) {
    return {s, non_finite_ ? kExitNonFinite : kExitFailure};
  }
  // Training diverged (`what` is not finite) at `where`: nothing of this state is saved, and
  // the run ends with kExitNonFinite, the same decision on every replica (they all check the
  // same all-reduced floats, or the same state).
  Status NonFinite(const std::string& where, const std::string& what);
  // kOk when the state about to be saved or exported is finite; NonFinite otherwise. Catches
  // on a device (whose reduce buffer the host does not see each step) what the host's check
  // of every step catches on the CPU.
  Status CheckFiniteState(const TrainingState& state, const EpochTotals& totals,
                          const std::string& where);

  // The chief restores the newest valid backup and broadcasts it, so every replica starts
  // from the same bits; a fresh run broadcasts the chief's initial weights.
  TrainingOutcome RestoreOrInitialise();
  // The parameters and state a fresh run starts from: the model's initial values for the seed,
  // or a declared model's --initial-weights.
  ModelState InitialState() const;
  // The test set's loss and correct count for `model`'s parameters (and state).
  StatusOr<nn::BatchStats> EvaluateTestSet(const ModelState& model);
  // The optimizer steps of the whole run.
  int64_t TotalSteps() const {
    return int64_t{options_.epochs} * std::max(0, plan_.StepsPerEpoch(train_count_));
  }
  // The learning rate of epoch `epoch`'s first step, as the epoch reports it: the built-in
  // model's by the seeds' schedule, a declared model's by its --lr-schedule.
  double EpochLearningRate(int epoch) const {
    if (model_ == nullptr) return nn::LearningRateForEpoch(epoch);
    const int64_t first = int64_t{epoch - 1} * plan_.StepsPerEpoch(train_count_);
    return schedule_.At(epoch, first, TotalSteps());
  }
  // The optimizer's tensors of a backup: Adam's m and v; SGD's momentum, or none without it.
  std::vector<std::string> OptimizerTensors() const {
    if (model_ == nullptr || options_.recipe.optimizer == OptimizerKind::kAdam)
      return {"adam_m", "adam_v"};
    if (options_.recipe.momentum > 0.0) return {kSgdMomentumTensor};
    return {};
  }
  // What the backups' fingerprint records of this run.
  nlohmann::json Fingerprint() const {
    return model_ ? TrainingFingerprint(options_, plan_.replicas,
                                        DatasetFingerprint(*data_, options_), model_)
                  : TrainingFingerprint(options_, plan_.replicas, *idx_, model_);
  }
  // The state to save: the model state (from the backend), the epoch's totals, the position.
  StatusOr<TrainingState> CurrentState(int completed_epochs, int64_t step);
  TrainingState StateOf(ModelState model, int completed_epochs, int64_t step) const;
  Status SaveBackup(int epoch, int64_t step, bool epoch_end);
  // `images_this_run`: images of this epoch trained by this process run (a resumed epoch's
  // throughput counts only those).
  Status EndOfEpoch(int epoch, int steps, double seconds, double images_this_run);
  Status Finish();
  // Elastic mode: the worker count divides the shard count and the backend computes this
  // replica's shards; announces the layout. Ok at once without elastic mode.
  Status CheckShardLayout();
  // This step's all-reduce with this replica's stop vote riding along: true when any replica
  // voted, so that every replica stops after this same step.
  StatusOr<bool> AllReduceStepAndStopVotes();
  // After a stop was agreed on at (epoch, step): the chief backs up that exact position
  // (unless the backup of that step was just taken) and waits for the write; every replica
  // reports it and returns the stop request's exit code.
  TrainingOutcome StopOnRequest(int epoch, int64_t step, bool backed_up);

  const TrainingContext& context_;
  const Options& options_;
  const DeclaredModel* model_;  // null: the built-in seeds' CNN
  const data::Dataset* idx_;    // the built-in model's data
  const TrainingData* data_;    // a declared model's
  int train_count_;             // examples of the training set
  data::ShardPlan plan_;
  nn::CpuStep eval_step_;  // the final test-set evaluation, on the CPU for every backend
  collective::Communicator* gradient_comm_;
  nn::LearningRateSchedule schedule_;  // a declared model's --lr-schedule
  std::unique_ptr<StepBackend> own_backend_;
  StepBackend* backend_ = nullptr;
  // The backend's shard buffers, when it computes more than one shard per step (elastic mode
  // with fewer workers than shards): all-reduced in the order of one shard per replica.
  std::vector<float*> shard_buffers_;
  int64_t iterations_ = 0;       // optimizer steps so far, mirrored here so that no step syncs
  double epoch_images_ = 0.0;    // the loss and correct sums of the epoch live in the backend
  double images_per_sec_ = 0.0;  // over the whole run, for train_end
  double train_seconds_ = 0.0;   // time in the epochs' step loops, this process run
  double allreduce_seconds_ = 0.0;
  double backup_stall_seconds_ = 0.0;  // the step loop waiting in SaveBackup, this process run
  int64_t steps_this_run_ = 0;
  bool non_finite_ = false;  // a NonFinite error was returned: the run exits kExitNonFinite
  int start_epoch_ = 1;
  int64_t start_step_ = 0;
  std::unique_ptr<checkpoint::BackupManager> backups_;
  std::unique_ptr<BackupWriter> backup_writer_;  // the chief's; declared after backups_
  std::unique_ptr<checkpoint::CheckpointManager> checkpoints_;
};

nlohmann::json TotalsJson(const EpochTotals& t) {
  return {{"loss_sum", t.loss_sum}, {"correct", t.correct}, {"images", t.images}};
}

TrainingState Trainer::StateOf(ModelState model, int completed_epochs, int64_t step) const {
  TrainingState s;
  s.fingerprint = Fingerprint();
  s.epoch = completed_epochs;
  s.step = step;
  s.optimizer_iterations = model.iterations;
  s.seed = options_.seed;
  s.tensors = {{"weights", std::move(model.params)}};
  if (!model.adam_m.empty()) {
    s.tensors.emplace_back("adam_m", std::move(model.adam_m));
    s.tensors.emplace_back("adam_v", std::move(model.adam_v));
  }
  if (!model.sgd_momentum.empty())
    s.tensors.emplace_back(kSgdMomentumTensor, std::move(model.sgd_momentum));
  if (!model.model_state.empty())
    s.tensors.emplace_back(kModelStateTensor, std::move(model.model_state));
  return s;
}

ModelState Trainer::InitialState() const {
  if (model_ == nullptr) {
    return {.params = nn::InitialParameters(options_.seed),
            .adam_m = std::vector<float>(nn::Layout::kCount, 0.0f),
            .adam_v = std::vector<float>(nn::Layout::kCount, 0.0f),
            .iterations = 0,
            .model_state = {},
            .sgd_momentum = {}};
  }
  const size_t count = model_->graph.parameter_count;
  const bool given = !model_->initial_weights_sha256.empty();  // --initial-weights
  const std::vector<std::string> optimizer = OptimizerTensors();
  auto zeros = [&](const char* name) {
    return std::vector<float>(std::ranges::count(optimizer, name) ? count : 0, 0.0f);
  };
  return {.params = given ? model_->initial_params
                          : model::InitialParameters(model_->graph, options_.seed),
          .adam_m = zeros("adam_m"),
          .adam_v = zeros("adam_v"),
          .iterations = 0,
          .model_state = given ? model_->initial_state : model::InitialState(model_->graph),
          .sgd_momentum = zeros(kSgdMomentumTensor)};
}

StatusOr<nn::BatchStats> Trainer::EvaluateTestSet(const ModelState& model) {
  if (model_ != nullptr) {
    return EvaluateDeclaredModel(*model_, model.params, model.model_state, *data_->eval,
                                 PrefetchOptionsOf(options_), options_.batch_size, context_.pool,
                                 *context_.kernels,
                                 static_cast<float>(options_.recipe.label_smoothing));
  }
  const data::Split& test = idx_->test;
  nn::Batch test_batch{test.images.data(), test.labels.data(), nullptr, test.count};
  std::vector<uint32_t> all(static_cast<size_t>(test.count));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(i);
  test_batch.index = all.data();
  return eval_step_.Evaluate(model.params.data(), test_batch);
}

Status Trainer::NonFinite(const std::string& where, const std::string& what) {
  non_finite_ = true;
  return Status::Error(
      "training diverged at " + where + ": " + what + " (exit " + std::to_string(kExitNonFinite) +
      "); this state was neither applied nor saved: the backups and checkpoints hold the last "
      "finite one. Resuming from them with the same configuration diverges the same way: "
      "change it first (a smaller --batch-size, another --seed, --allreduce-dtype float32), "
      "or delete the backup directory to start afresh");
}

Status Trainer::CheckFiniteState(const TrainingState& state, const EpochTotals& totals,
                                 const std::string& where) {
  if (!std::isfinite(totals.loss_sum) || !std::isfinite(totals.correct)) {
    return NonFinite(where, "the epoch's loss sum is " + std::to_string(totals.loss_sum));
  }
  for (const auto& [name, values] : state.tensors) {
    if (!AllFinite(values.data(), values.size()))
      return NonFinite(where, FirstNonFinite(values.data(), values.size(), name));
  }
  return Status::Ok();
}

StatusOr<TrainingState> Trainer::CurrentState(int completed_epochs, int64_t step) {
  auto model = backend_->GetState();
  if (!model.ok())
    return model.status().WithContext("copying the state from " + backend_->description());
  EpochTotals totals;
  TJ_RETURN_IF_ERROR(backend_->GetEpochSums(&totals.loss_sum, &totals.correct));
  totals.images = epoch_images_;
  TrainingState s = StateOf(std::move(*model), completed_epochs, step);
  TJ_RETURN_IF_ERROR(CheckFiniteState(s, totals,
                                      "the save after step " + std::to_string(step) + " of epoch " +
                                          std::to_string(completed_epochs + (step == 0 ? 0 : 1))));
  s.extra = {{"epoch_totals", TotalsJson(totals)}};
  return s;
}

TrainingOutcome Trainer::RestoreOrInitialise() {
  collective::Communicator* comm = context_.comm;
  std::string encoded;
  std::string restored_path;
  int64_t size = 0;
  if (comm->rank() == 0) {
    std::optional<TrainingState> state;
    Status error;
    if (backups_) {
      // The chief claims the backups for its gang first: an older gang's chief, if one still
      // runs, can no longer write one that this gang or a later one restores.
      Status claimed = backups_->Claim();
      const nlohmann::json fingerprint = Fingerprint();
      auto r =
          claimed.ok()
              ? backups_->Restore(
                    [&](const nlohmann::json& found) { return ResumeRefusal(fingerprint, found); },
                    &restored_path)
              : StatusOr<std::optional<TrainingState>>(claimed);
      if (!r.ok()) {
        error = r.status();
      } else {
        state = std::move(*r);
      }
    }
    if (!state) {
      // A fresh start: an old run's final marker must not stop the evaluator early.
      if (error.ok() && checkpoints_) error = checkpoints_->ClearFinalMarker();
      state = StateOf(InitialState(), 0, 0);
      state->extra = {{"epoch_totals", TotalsJson({})}};
      restored_path.clear();
    }
    auto bytes = checkpoint::EncodeState(*state, options_.identity.job_key);
    if (error.ok() && !bytes.ok()) error = bytes.status();
    // A negative size tells the workers that the chief could not restore: they stop too,
    // with a message pointing at the chief, instead of waiting for a broadcast.
    size = error.ok() ? static_cast<int64_t>(bytes->size() + restored_path.size() + 1) : -1;
    Status s = comm->Broadcast(&size, sizeof size, 0);
    if (!error.ok()) return Failed(error);
    if (!s.ok()) return PeerLost(s);
    encoded = restored_path + '\n' + *bytes;
    s = comm->Broadcast(encoded.data(), encoded.size(), 0);
    if (!s.ok()) return PeerLost(s);
  } else {
    Status s = comm->Broadcast(&size, sizeof size, 0);
    if (!s.ok()) return PeerLost(s);
    if (size < 0) {
      return Failed(Status::Error("the chief could not restore the backup in " +
                                  options_.backup_dir + "; see the chief's log"));
    }
    encoded.resize(static_cast<size_t>(size));
    s = comm->Broadcast(encoded.data(), encoded.size(), 0);
    if (!s.ok()) return PeerLost(s);
  }
  size_t newline = encoded.find('\n');
  restored_path = encoded.substr(0, newline);
  auto state = checkpoint::DecodeState(encoded.substr(newline + 1), "the chief's broadcast",
                                       options_.identity.job_key);
  if (!state.ok()) return Failed(state.status());
  const auto* weights = state->FindTensor("weights");
  const auto* model_state = state->FindTensor(kModelStateTensor);
  const size_t count = backend_->parameter_count();
  const size_t state_count = model_ ? model_->graph.state_count : 0;
  bool complete =
      weights && weights->size() == count && (model_state ? model_state->size() : 0) == state_count;
  std::string names = "weights";
  for (const std::string& name : OptimizerTensors()) {
    const auto* t = state->FindTensor(name);
    complete = complete && t && t->size() == count;
    names += ", " + name;
  }
  if (!complete) {
    return Failed(
        Status::Error("backup " + restored_path + " lacks the tensors " + names +
                      (state_count > 0 ? std::string(", ") + kModelStateTensor : std::string()) +
                      " of this model and optimizer"));
  }
  iterations_ = state->optimizer_iterations;
  auto tensor = [&](const char* name) {
    const auto* t = state->FindTensor(name);
    return t ? *t : std::vector<float>{};
  };
  if (Status s = backend_->SetState({*weights, tensor("adam_m"), tensor("adam_v"), iterations_,
                                     model_state ? *model_state : std::vector<float>{},
                                     tensor(kSgdMomentumTensor)});
      !s.ok()) {
    return Failed(s.WithContext("loading the state into " + backend_->description()));
  }
  const int steps = plan_.StepsPerEpoch(train_count_);
  start_epoch_ = static_cast<int>(state->epoch) + 1;
  start_step_ = state->step;
  if (start_step_ >= steps) {  // a backup taken after an epoch's last step
    ++start_epoch_;
    start_step_ = 0;
  }
  const auto& t = state->extra.value("epoch_totals", nlohmann::json::object());
  epoch_images_ = t.value("images", 0.0);
  if (Status s = backend_->SetEpochSums(t.value("loss_sum", 0.0), t.value("correct", 0.0));
      !s.ok()) {
    return Failed(s);
  }
  if (!restored_path.empty()) {
    // Reported as the save reported it: the epoch in progress and the steps done in it.
    int epoch =
        state->step == 0 ? static_cast<int>(state->epoch) : static_cast<int>(state->epoch) + 1;
    int64_t step = state->step == 0 ? steps : state->step;
    nlohmann::json restored = {
        {"event", "restored"}, {"epoch", epoch}, {"step", step}, {"path", restored_path}};
    if (options_.elastic_shards > 0) {
      restored["elastic_shards"] = options_.elastic_shards;
      restored["workers"] = plan_.replicas;
      restored["backup_workers"] = state->fingerprint.value("workers", 0);
    }
    context_.log->Emit(restored);
  }
  return {};
}

Status Trainer::SaveBackup(int epoch, int64_t step, bool epoch_end) {
  if (!backup_writer_) {
    // A worker on a device checks the state the chief saves (bitwise the same), so that every
    // replica stops at the same save point when it is not finite. On the CPU every step's
    // reduced floats were checked already.
    if (!backend_->device_buffers() || options_.backup_dir.empty()) return Status::Ok();
    auto state = epoch_end ? CurrentState(epoch, 0) : CurrentState(epoch - 1, step);
    return state.status();
  }
  // The training threads wait for the snapshot (and for the previous write, if it is still
  // in flight); the rest happens on the writer's thread.
  auto start = RealClock::Get()->Now();
  auto state = epoch_end ? CurrentState(epoch, 0) : CurrentState(epoch - 1, step);
  if (!state.ok()) return state.status();
  Status s = backup_writer_->Submit(std::move(*state), epoch, step);
  backup_stall_seconds_ += SecondsBetween(start, RealClock::Get()->Now());
  return s;
}

Status Trainer::EndOfEpoch(int epoch, int steps, double seconds, double images_this_run) {
  EpochTotals totals{.images = epoch_images_};
  TJ_RETURN_IF_ERROR(backend_->GetEpochSums(&totals.loss_sum, &totals.correct));
  if (!std::isfinite(totals.loss_sum)) {
    return NonFinite("the end of epoch " + std::to_string(epoch),
                     "the epoch's loss sum is " + std::to_string(totals.loss_sum));
  }
  const double loss = totals.images > 0 ? totals.loss_sum / totals.images : 0.0;
  const double accuracy = totals.images > 0 ? totals.correct / totals.images : 0.0;
  const double images_per_sec = seconds > 0 ? images_this_run / seconds : 0.0;
  context_.log->Emit({{"event", "epoch_end"},
                      {"epoch", epoch},
                      {"steps", steps},
                      {"loss", loss},
                      {"accuracy", accuracy},
                      {"lr", EpochLearningRate(epoch)},
                      {"seconds", seconds},
                      {"images_per_sec", images_per_sec}});
  context_.progress->Update([&](ProgressSnapshot& p) {
    p.loss = loss;
    p.accuracy = accuracy;
    p.images_per_sec = images_per_sec;
  });
  if (context_.is_chief && context_.scalars) {
    context_.scalars("epoch_loss", epoch, static_cast<float>(loss));
    context_.scalars("epoch_accuracy", epoch, static_cast<float>(accuracy));
    context_.scalars("learning_rate", epoch, static_cast<float>(EpochLearningRate(epoch)));
    context_.scalars("images_per_sec", epoch, static_cast<float>(images_per_sec));
  }
  epoch_images_ = 0.0;
  TJ_RETURN_IF_ERROR(backend_->SetEpochSums(0.0, 0.0));
  if (context_.is_chief && checkpoints_) {
    auto state = CurrentState(epoch, 0);
    if (!state.ok()) return state.status();
    // Weights (and a declared model's state) only: checkpoints are for evaluation.
    std::erase_if(state->tensors, [](const auto& t) {
      return t.first.rfind("adam_", 0) == 0 || t.first == kSgdMomentumTensor;
    });
    auto path = checkpoints_->Save(*state);
    if (!path.ok())
      return path.status().WithContext("writing checkpoint for epoch " + std::to_string(epoch));
  }
  if (options_.save_freq_steps == 0)
    TJ_RETURN_IF_ERROR(SaveBackup(epoch, steps, /*epoch_end=*/true));
  return Status::Ok();
}

Status Trainer::Finish() {
  auto model = backend_->GetState();
  if (!model.ok())
    return model.status().WithContext("copying the final weights from " + backend_->description());
  const std::vector<float>& params = model->params;
  if (!AllFinite(params.data(), params.size())) {
    return NonFinite("the end of training",
                     FirstNonFinite(params.data(), params.size(), "weights"));
  }
  StatusOr<nn::BatchStats> evaluated = EvaluateTestSet(*model);
  if (!evaluated.ok()) return evaluated.status();
  const nn::BatchStats s = *evaluated;
  if (context_.is_chief) {
    if (checkpoints_) TJ_RETURN_IF_ERROR(checkpoints_->WriteFinalMarker(options_.epochs));
    if (!options_.export_dir.empty()) {
      TJ_RETURN_IF_ERROR(model_ ? ExportDeclaredModel(options_.export_dir, *model_, params,
                                                      model->model_state, options_.epochs)
                                : ExportModel(options_.export_dir, params, options_.epochs));
    }
    if (backup_writer_) TJ_RETURN_IF_ERROR(backup_writer_->Wait());
    if (backups_ && !options_.keep_backup) TJ_RETURN_IF_ERROR(backups_->Delete());
  }
  context_.log->Emit(
      {{"event", "train_end"},
       {"epochs", options_.epochs},
       {"device", backend_->description()},
       {"test_loss", s.loss_sum / s.rows},
       {"test_accuracy", static_cast<double>(s.correct) / s.rows},
       {"weights_sha256", nn::WeightsDigest(params.data(), params.size())},
       {"images_per_sec", images_per_sec_},
       {"train_seconds", train_seconds_},
       {"step_ms", steps_this_run_ ? 1e3 * train_seconds_ / steps_this_run_ : 0.0},
       {"allreduce_ms", steps_this_run_ ? 1e3 * allreduce_seconds_ / steps_this_run_ : 0.0},
       {"backup_stall_seconds", backup_stall_seconds_},
       {"backup_cpu_seconds", backup_writer_ ? backup_writer_->cpu_seconds() : 0.0}});
  failpoint::Hit("train.after_end");  // trained, about to exit 0
  return Status::Ok();
}

StatusOr<bool> Trainer::AllReduceStepAndStopVotes() {
  const float vote = context_.stop && context_.stop->requested() ? 1.0f : 0.0f;
  float* buffer = backend_->reduce_buffer();
  if (!backend_->device_buffers()) {
    const size_t floats = backend_->reduce_floats();
    buffer[floats - 1] = vote;
    if (shard_buffers_.size() <= 1) {
      TJ_RETURN_IF_ERROR(gradient_comm_->AllReduceSum(buffer, floats));
    } else {
      // Elastic mode, several shards here: the vote rides in the first shard only.
      for (size_t i = 1; i < shard_buffers_.size(); ++i) shard_buffers_[i][floats - 1] = 0.0f;
      TJ_RETURN_IF_ERROR(gradient_comm_->AllReduceShardsSum(
          shard_buffers_.data(), static_cast<int>(shard_buffers_.size()), floats));
    }
    return buffer[floats - 1] > 0.0f;
  }
  TJ_RETURN_IF_ERROR(gradient_comm_->AllReduceSum(buffer, nn::Layout::kCount + 2));
  // Device buffers hold no host float: the votes take the host communicator.
  float votes = vote;
  TJ_RETURN_IF_ERROR(context_.comm->AllReduceSum(&votes, 1));
  return votes > 0.0f;
}

TrainingOutcome Trainer::StopOnRequest(int epoch, int64_t step, bool backed_up) {
  const bool epoch_end = step == plan_.StepsPerEpoch(train_count_);
  if (!backed_up) {
    if (Status s = SaveBackup(epoch, step, epoch_end); !s.ok()) return Failed(s);
  }
  if (backup_writer_) {
    if (Status s = backup_writer_->Wait(); !s.ok()) return Failed(s);
  }
  const int signal = context_.stop ? context_.stop->signal() : 0;
  context_.log->Emit({{"event", "stopped"},
                      {"epoch", epoch},
                      {"step", step},
                      {"backup", !options_.backup_dir.empty()},
                      {"requested_here", context_.stop && context_.stop->requested()},
                      {"signal", signal}});
  context_.progress->Update([](ProgressSnapshot& p) { p.state = "stopped"; });
  return {Status::Ok(), context_.stop ? context_.stop->exit_code() : kExitPeerLost};
}

Status Trainer::CheckShardLayout() {
  if (options_.elastic_shards <= 0) return Status::Ok();
  if (std::string e = data::ShardLayoutError(plan_.shards, plan_.replicas); !e.empty()) {
    return Status::Error("--elastic-shards (TJ_ELASTIC_SHARDS): " + e);
  }
  if (backend_->shards() != plan_.ShardsPerReplica()) {
    return Status::Error("elastic mode: " + std::to_string(plan_.shards) + " shards on " +
                         std::to_string(plan_.replicas) + " workers take " +
                         std::to_string(plan_.ShardsPerReplica()) + " per worker, and " +
                         backend_->description() + " computes " +
                         std::to_string(backend_->shards()) + " per step");
  }
  if (backend_->shards() > 1) {
    for (int i = 0; i < backend_->shards(); ++i)
      shard_buffers_.push_back(backend_->shard_buffer(i));
  }
  context_.log->Emit({{"event", "elastic"},
                      {"elastic_shards", plan_.shards},
                      {"workers", plan_.replicas},
                      {"shards_per_worker", plan_.ShardsPerReplica()},
                      {"global_batch", plan_.GlobalBatch()}});
  return Status::Ok();
}

TrainingOutcome Trainer::Run() {
  if (Status s = CheckShardLayout(); !s.ok()) return Failed(s);
  if (plan_.StepsPerEpoch(train_count_) < 1) {
    return Failed(Status::Error("the global batch (" + std::to_string(plan_.GlobalBatch()) +
                                ") is larger than the training set (" +
                                std::to_string(train_count_) + " images)"));
  }
  if (TrainingOutcome r = RestoreOrInitialise(); !r.status.ok()) return r;
  const int steps = plan_.StepsPerEpoch(train_count_);
  const float scale = 1.0f / static_cast<float>(plan_.GlobalBatch());
  context_.progress->Update([&](ProgressSnapshot& p) {
    p.state = "training";
    p.total_epochs = options_.epochs;
  });
  double train_seconds = 0.0, train_images = 0.0;
  bool stop_after_epoch = false;
  if (context_.stop) context_.stop->SetMode(StopRequest::Mode::kStopAtStepEnd);
  for (int epoch = start_epoch_; epoch <= options_.epochs; ++epoch) {
    const std::vector<uint32_t> order = data::EpochOrder(options_.seed, epoch, train_count_);
    const int64_t first_step = epoch == start_epoch_ ? start_step_ : 0;
    auto epoch_start = RealClock::Get()->Now();
    if (Status st =
            backend_->BeginEpoch(epoch, order, plan_.SliceStart(static_cast<int>(first_step)),
                                 plan_.GlobalBatch(), EpochLearningRate(epoch));
        !st.ok()) {
      return Failed(st);
    }
    double images_this_run = 0.0;
    for (int64_t step = first_step; step < steps; ++step) {
      failpoint::Hit("train.step");
      if (Status st = backend_->ComputeGradients(scale); !st.ok()) return Failed(st);
      auto reduce_start = RealClock::Get()->Now();
      auto stop = AllReduceStepAndStopVotes();
      if (!stop.ok()) return PeerLost(stop.status());
      allreduce_seconds_ += SecondsBetween(reduce_start, RealClock::Get()->Now());
      // The summed gradients, loss and correct count, the same floats on every replica: a
      // non-finite one stops every replica here, before Adam applies it and anything saves it.
      if (!backend_->device_buffers()) {
        // The gradients, what else rides along (a declared model's moving statistics), the
        // loss and the correct count: all but the stop vote.
        const float* reduced = backend_->reduce_buffer();
        const size_t checked = backend_->reduce_floats() - 1;
        if (!AllFinite(reduced, checked)) {
          const std::string where =
              "step " + std::to_string(step + 1) + " of epoch " + std::to_string(epoch);
          const size_t loss_at = checked - 2, params = backend_->parameter_count();
          const bool loss = !std::isfinite(reduced[loss_at]);
          const bool gradient = !AllFinite(reduced, params);
          return Failed(
              NonFinite(where, loss       ? "the summed loss is " + std::to_string(reduced[loss_at])
                               : gradient ? FirstNonFinite(reduced, params, "the summed gradient")
                                          : FirstNonFinite(reduced + params, loss_at - params,
                                                           "the summed moving statistics")));
        }
      }
      if (Status st = backend_->ApplyUpdate(); !st.ok()) return Failed(st);
      ++steps_this_run_;
      ++iterations_;
      // This process's first step: after a restart, the moment the job trains again.
      if (steps_this_run_ == 1) {
        context_.log->Emit({{"event", "first_step"},
                            {"epoch", epoch},
                            {"step", step + 1},
                            {"global_step", iterations_}});
      }
      epoch_images_ += plan_.GlobalBatch();
      images_this_run += plan_.GlobalBatch();
      context_.progress->Update([&](ProgressSnapshot& p) {
        p.epoch = epoch;
        p.step = step + 1;
        p.global_step = iterations_;
      });
      const bool backed_up =
          options_.save_freq_steps > 0 && iterations_ % options_.save_freq_steps == 0;
      if (backed_up) {
        if (Status st = SaveBackup(epoch, step + 1, /*epoch_end=*/false); !st.ok())
          return Failed(st);
      }
      if (*stop && step + 1 < steps) return StopOnRequest(epoch, step + 1, backed_up);
      // A stop agreed on in an epoch's last step takes effect after the epoch's end.
      stop_after_epoch = *stop;
    }
    // The epoch's time includes the device finishing the steps queued on it.
    if (Status st = backend_->WaitForSteps(); !st.ok()) return Failed(st);
    double seconds = SecondsBetween(epoch_start, RealClock::Get()->Now());
    train_seconds += seconds;
    train_images += images_this_run;
    if (Status st = EndOfEpoch(epoch, steps, seconds, images_this_run); !st.ok()) return Failed(st);
    if (stop_after_epoch && epoch < options_.epochs) {
      return StopOnRequest(epoch, steps, /*backed_up=*/options_.save_freq_steps == 0);
    }
  }
  images_per_sec_ = train_seconds > 0 ? train_images / train_seconds : 0.0;
  train_seconds_ = train_seconds;
  if (Status st = Finish(); !st.ok()) return Failed(st);
  context_.progress->Update([](ProgressSnapshot& p) { p.state = "succeeded"; });
  return {};
}

}  // namespace

TrainingOutcome RunTrainingLoop(const TrainingContext& context) {
  Trainer trainer(context);
  return trainer.Run();
}

}  // namespace tj::train
