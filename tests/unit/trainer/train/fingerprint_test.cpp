// Which backups a run resumes: the fingerprint of a run with and without elastic mode, the
// rule that compares it with a backup's, the refusals' wording, and a backup written before
// elastic mode existed (a committed file) that must stay resumable.
#include "trainer/train/fingerprint.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "tests/support/temp_dir.h"
#include "trainer/checkpoint/state_file.h"

namespace tj::train {
namespace {

// The dataset of the committed backup (Fashion-MNIST's digest); nothing else of it is read.
data::Dataset FashionMnist() {
  data::Dataset d;
  d.digest = "ca3ab2a37f845e1b8ae23cab1b51749a3011ba3bf1d9016176d75cbaabac376f";
  return d;
}

Options Run(int batch_size, int elastic_shards) {
  Options o;
  o.batch_size = batch_size;
  o.steps_per_epoch = 12;
  o.seed = 42;
  o.elastic_shards = elastic_shards;
  return o;
}

nlohmann::json Fingerprint(int workers, int elastic_shards, int batch_size = 64) {
  return TrainingFingerprint(Run(batch_size, elastic_shards), workers, FashionMnist());
}

bool Has(const std::optional<std::string>& refusal, const std::string& part) {
  return refusal && refusal->find(part) != std::string::npos;
}

// A refusal that says every one of `parts`.
void ExpectRefusalSays(const std::optional<std::string>& refusal,
                       std::initializer_list<const char*> parts) {
  ASSERT_TRUE(refusal.has_value());
  for (const char* part : parts) EXPECT_TRUE(Has(refusal, part)) << part << "\n" << *refusal;
}

TEST(TrainingFingerprintTest, WithoutElasticModeItIsWhatItWas) {
  const nlohmann::json f = Fingerprint(2, 0);
  EXPECT_EQ(f, nlohmann::json({{"model", "seeds-cnn"},
                               {"parameters", 347146},
                               {"batch_size", 64},
                               {"workers", 2},
                               {"steps_per_epoch_cap", 12},
                               {"seed", 42},
                               {"dataset_sha256", FashionMnist().digest}}));
}

TEST(TrainingFingerprintTest, ElasticModeRecordsTheShardsAndTheGlobalBatch) {
  const nlohmann::json f = Fingerprint(1, 4);
  EXPECT_EQ(f["elastic_shards"], 4);
  EXPECT_EQ(f["global_batch"], 256);
  EXPECT_EQ(f["batch_size"], 64);
  EXPECT_EQ(f["workers"], 1);
}

TEST(ResumeRefusalTest, ElasticRunsResumeAtEveryWorkerCountOfTheSameShards) {
  for (int written_by : {1, 2, 4}) {
    for (int resumed_by : {1, 2, 4}) {
      EXPECT_EQ(ResumeRefusal(Fingerprint(resumed_by, 4), Fingerprint(written_by, 4)), std::nullopt)
          << written_by << " -> " << resumed_by;
    }
  }
}

// A run without elastic mode is S shards of one per worker: either mode resumes the other's
// backup of the same shards.
TEST(ResumeRefusalTest, EitherModeResumesTheOthersBackupOfTheSameShards) {
  EXPECT_EQ(ResumeRefusal(Fingerprint(1, 2), Fingerprint(2, 0)), std::nullopt);
  EXPECT_EQ(ResumeRefusal(Fingerprint(2, 0), Fingerprint(1, 2)), std::nullopt);
  EXPECT_EQ(ResumeRefusal(Fingerprint(2, 0), Fingerprint(2, 0)), std::nullopt);
}

TEST(ResumeRefusalTest, WithoutElasticModeAnotherWorkerCountIsRefusedNamingBoth) {
  ExpectRefusalSays(ResumeRefusal(Fingerprint(1, 0), Fingerprint(2, 0)),
                    {"was written by 2 workers without elastic mode (global batch 128) and this "
                     "run has 1 worker without elastic mode (global batch 64)",
                     "Run 2 workers", "--elastic-shards 2", "empty directory"});
}

TEST(ResumeRefusalTest, AnElasticBackupIsRefusedWithoutElasticModeAtAnotherCount) {
  ExpectRefusalSays(
      ResumeRefusal(Fingerprint(1, 0), Fingerprint(2, 4)),
      {"4 elastic shards on 2 workers (global batch 256)", "1 worker without elastic mode",
       "--elastic-shards 4 (or TJ_ELASTIC_SHARDS=4)", "or with 4 workers"});
}

TEST(ResumeRefusalTest, AnotherShardCountIsRefusedInElasticMode) {
  ExpectRefusalSays(ResumeRefusal(Fingerprint(2, 2), Fingerprint(2, 4)),
                    {"4 elastic shards on 2 workers (global batch 256) and this run has 2 "
                     "elastic shards on 2 workers (global batch 128)",
                     "the shard count fixes the global batch", "Resume with --elastic-shards 4"});
}

TEST(ResumeRefusalTest, AnotherGlobalBatchIsRefused) {
  ExpectRefusalSays(
      ResumeRefusal(Fingerprint(2, 2, 32), Fingerprint(2, 2, 64)),
      {"batch_size: backup has 64, this run has 32", "Resume with the original configuration"});
}

TEST(ResumeRefusalTest, OtherFieldsAndTheLayoutAreBothNamed) {
  nlohmann::json backup = Fingerprint(2, 0);
  backup["seed"] = 7;
  ExpectRefusalSays(ResumeRefusal(Fingerprint(1, 0), backup),
                    {"seed: backup has 7, this run has 42", "Run 2 workers"});
}

// A backup a two-worker run wrote before elastic mode existed (a real one, its tensors cut to
// four floats and signed again under "fixture-key"): it is read, and resumed by that
// configuration, in either mode, as before; at another count it is refused.
TEST(ResumeRefusalTest, ABackupWrittenBeforeElasticModeStillResumes) {
  auto state = checkpoint::ReadStateFile(std::string(TJ_SOURCE_DIR) +
                                             "/tests/unit/trainer/train/testdata/"
                                             "backup-2-workers-before-elastic",
                                         "fixture-key");
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->epoch, 0);
  EXPECT_EQ(state->step, 10);
  EXPECT_EQ(state->extra["epoch_totals"]["images"], 1280.0);
  EXPECT_EQ(state->fingerprint, Fingerprint(2, 0));
  EXPECT_EQ(ResumeRefusal(Fingerprint(2, 0), state->fingerprint), std::nullopt);
  EXPECT_EQ(ResumeRefusal(Fingerprint(1, 2), state->fingerprint), std::nullopt);
  ExpectRefusalSays(ResumeRefusal(Fingerprint(1, 0), state->fingerprint), {"Run 2 workers"});
  ExpectRefusalSays(ResumeRefusal(Fingerprint(1, 4), state->fingerprint),
                    {"Resume with --elastic-shards 2"});
}

}  // namespace
}  // namespace tj::train
