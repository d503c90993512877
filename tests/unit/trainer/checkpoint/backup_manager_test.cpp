#include "trainer/checkpoint/backup_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "common/sha256.h"
#include "tests/support/captured_log.h"
#include "tests/support/temp_dir.h"

namespace tj::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::CapturedLog;
using testing::ReadBytes;
using testing::SmallTmpfs;
using testing::TempDir;
using testing::WriteBytes;

const nlohmann::json kFingerprint = {{"model", "cnn"}, {"batch_size", 64}, {"workers", 2}};

TrainingState StateAt(int64_t epoch, int64_t step) {
  TrainingState s;
  s.fingerprint = kFingerprint;
  s.epoch = epoch;
  s.step = step;
  s.optimizer_iterations = epoch * 100 + step;
  s.seed = 42;
  s.tensors = {{"weights", std::vector<float>(64, static_cast<float>(epoch * 1000 + step))}};
  return s;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(BackupManagerTest, NoDirectoryOrEmptyDirectoryIsAFreshStart) {
  TempDir dir;
  BackupManager missing(dir.Join("not-yet"), nullptr);
  auto r = missing.Restore(kFingerprint);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->has_value());

  BackupManager empty(dir.path(), nullptr);
  r = empty.Restore(kFingerprint);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->has_value());
}

TEST(BackupManagerTest, SaveThenRestoreReturnsTheNewestAndKeepsThePrevious) {
  TempDir dir;
  BackupManager m(dir.Join("backup"), nullptr);
  ASSERT_TRUE(m.Save(StateAt(0, 100)).ok());
  ASSERT_TRUE(m.Save(StateAt(0, 200)).ok());
  ASSERT_TRUE(m.Save(StateAt(1, 0)).ok());
  EXPECT_EQ(Names(m.dir()), (std::vector<std::string>{"backup-2", "backup-3"}));
  std::string path;
  auto r = m.Restore(kFingerprint, &path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, StateAt(1, 0));
  EXPECT_EQ(path, m.dir() + "/backup-3");
}

TEST(BackupManagerTest, SequenceNumbersOrderNumericallyNotLexically) {
  TempDir dir;
  BackupManager m(dir.path(), nullptr);
  for (int i = 1; i <= 11; ++i) ASSERT_TRUE(m.Save(StateAt(i, 0)).ok());
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"backup-10", "backup-11"}));
  auto r = m.Restore(kFingerprint);
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->epoch, 11);
}

void ExpectFallbackFrom(const std::string& damage_name,
                        const std::function<void(const std::string&)>& damage,
                        const std::string& reason) {
  SCOPED_TRACE(damage_name);
  TempDir dir;
  CapturedLog log;
  BackupManager m(dir.path(), log.log());
  ASSERT_TRUE(m.Save(StateAt(1, 0)).ok());
  ASSERT_TRUE(m.Save(StateAt(1, 100)).ok());
  damage(dir.Join("backup-2"));
  std::string path;
  auto r = m.Restore(kFingerprint, &path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, StateAt(1, 0));
  EXPECT_EQ(path, dir.Join("backup-1"));
  const std::string err = log.Stderr();
  EXPECT_NE(err.find("warning: skipping backup " + dir.Join("backup-2")), std::string::npos) << err;
  EXPECT_NE(err.find(reason), std::string::npos) << err;
  EXPECT_NE(err.find("trying the previous backup"), std::string::npos) << err;
}

TEST(BackupManagerTest, CorruptNewestFallsBackToThePreviousWithAWarning) {
  ExpectFallbackFrom(
      "truncated",
      [](const std::string& p) {
        std::string b = ReadBytes(p);
        WriteBytes(p, b.substr(0, b.size() / 2));
      },
      "truncated");
  ExpectFallbackFrom(
      "flipped data byte",
      [](const std::string& p) {
        std::string b = ReadBytes(p);
        b[b.size() - 100] ^= 0x40;
        WriteBytes(p, b);
      },
      "digest mismatch");
  ExpectFallbackFrom(
      "empty (torn before any byte landed)", [](const std::string& p) { WriteBytes(p, ""); },
      "empty file");
  ExpectFallbackFrom(
      "foreign file", [](const std::string& p) { WriteBytes(p, "hello\n"); },
      "not a tj-trainer checkpoint");
}

TEST(BackupManagerTest, NoValidBackupIsAnErrorNotAFreshStart) {
  TempDir dir;
  CapturedLog log;
  BackupManager m(dir.path(), log.log());
  ASSERT_TRUE(m.Save(StateAt(1, 0)).ok());
  ASSERT_TRUE(m.Save(StateAt(2, 0)).ok());
  WriteBytes(dir.Join("backup-1"), "");
  std::string b = ReadBytes(dir.Join("backup-2"));
  WriteBytes(dir.Join("backup-2"), b.substr(0, 30));
  auto r = m.Restore(kFingerprint);
  ASSERT_FALSE(r.ok());
  const std::string msg = r.status().message();
  EXPECT_NE(msg.find("no valid backup in " + dir.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.Join("backup-1") + ": empty file"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.Join("backup-2") + ": truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Refusing to start from scratch"), std::string::npos) << msg;
}

TEST(BackupManagerTest, BackupOfAnotherConfigurationIsRefusedNamingTheField) {
  TempDir dir;
  BackupManager m(dir.path(), nullptr);
  ASSERT_TRUE(m.Save(StateAt(1, 0)).ok());
  nlohmann::json other = kFingerprint;
  other["batch_size"] = 32;
  auto r = m.Restore(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("batch_size: backup has 64, this run has 32"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find(dir.Join("backup-1")), std::string::npos);
}

TEST(BackupManagerTest, LeftoverTempFilesAreIgnoredByRestoreAndOthersAreLeftAlone) {
  TempDir dir;
  BackupManager m(dir.path(), nullptr);
  ASSERT_TRUE(m.Save(StateAt(1, 0)).ok());
  // Another writer's write of backup-2 is in flight (or it crashed mid-write).
  WriteBytes(dir.Join(".backup-2.tmp.Ab12Cd"), ReadBytes(dir.Join("backup-1")).substr(0, 50));
  auto r = m.Restore(kFingerprint);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().message();
  EXPECT_EQ((*r)->epoch, 1);
  // Saving never deletes another writer's temporary file (before, Save removed every one).
  ASSERT_TRUE(m.Save(StateAt(2, 0)).ok());
  EXPECT_EQ(Names(dir.path()),
            (std::vector<std::string>{".backup-2.tmp.Ab12Cd", "backup-1", "backup-2"}));
}

TEST(BackupManagerTest, OnlyTempFilesIsAFreshStart) {
  TempDir dir;
  WriteBytes(dir.Join(".backup-1.tmp.Ab12Cd"), "partial");
  BackupManager m(dir.path(), nullptr);
  auto r = m.Restore(kFingerprint);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->has_value());
}

TEST(BackupManagerTest, DeleteRemovesBackupsAndTempFilesButNotOtherFiles) {
  TempDir dir;
  BackupManager m(dir.path(), nullptr);
  ASSERT_TRUE(m.Save(StateAt(1, 0)).ok());
  ASSERT_TRUE(m.Save(StateAt(2, 0)).ok());
  WriteBytes(dir.Join(".backup-3.tmp.Ab12Cd"), "partial");  // another writer's
  WriteBytes(dir.Join("README"), "user file");
  ASSERT_TRUE(m.Delete().ok());
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{".backup-3.tmp.Ab12Cd", "README"}));
  auto r = m.Restore(kFingerprint);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
  EXPECT_TRUE(BackupManager(dir.Join("absent"), nullptr).Delete().ok());
}

TEST(BackupManagerTest, FileNamesParseStrictly) {
  EXPECT_EQ(BackupManager::ParseFileName("backup-12"), 12);
  EXPECT_EQ(BackupManager::FileName(7), "backup-7");
  for (const char* bad :
       {"backup-", "backup-x", "backup-1x", "backup--1", "xbackup-1", ".backup-1.tmp.a"}) {
    EXPECT_EQ(BackupManager::ParseFileName(bad), std::nullopt) << bad;
  }
}

TEST(BackupManagerTest, SaveIntoAnUnwritablePlaceNamesTheDirectory) {
  TempDir dir;
  WriteBytes(dir.Join("file"), "x");
  BackupManager m(dir.Join("file/backup"), nullptr);
  Status s = m.Save(StateAt(1, 0));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir.Join("file/backup")), std::string::npos) << s.message();
}

// ---- Fencing: the job's UID and the gang number.

constexpr char kUid[] = "6f1c2d9e-0b7a-4c51-9a3e-2f8d7c6b5a41";

// Gang 1's chief saved a backup at epoch 1; then gang 2 started (while gang 1's chief may still
// run: a partitioned node) and claimed the directory.
struct TwoGangs {
  TempDir dir;
  CapturedLog log;
  BackupManager gang1{dir.path(), log.log(), {kUid, 1}};
  BackupManager gang2{dir.path(), log.log(), {kUid, 2}};
  std::string scoped = dir.Join(std::string("job-") + kUid);
  TwoGangs() {
    EXPECT_TRUE(gang1.Claim().ok());
    EXPECT_TRUE(gang1.Save(StateAt(1, 0)).ok());
    EXPECT_TRUE(gang2.Claim().ok());
  }
};

TEST(BackupFencing, AStaleChiefCannotWriteOnceANewerGangClaimed) {
  TwoGangs g;
  Status stale = g.gang1.Save(StateAt(2, 0));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.message(), "backups in " + g.scoped +
                                 " belong to gang 2 of this job; this process is of gang 1, an "
                                 "older one, and must not write or restore them (a stale "
                                 "chief: the job has moved on)");
  EXPECT_FALSE(g.gang1.Restore(kFingerprint).ok());
  EXPECT_FALSE(g.gang1.Claim().ok());
  std::string path;
  auto r = g.gang2.Restore(kFingerprint, &path);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().message();
  EXPECT_EQ((*r)->epoch, 1);
  EXPECT_EQ(path, g.scoped + "/backup-1");
}

TEST(BackupFencing, ABackupThatRacedTheClaimIsNeverRestored) {
  TwoGangs g;
  TempDir& dir = g.dir;
  CapturedLog& log = g.log;
  BackupManager& gang2 = g.gang2;
  const std::string& scoped = g.scoped;
  // Gang 1's chief checked the fence just before gang 2 claimed, and renames its backup-2 in
  // just after (what its Save writes, by hand: the check cannot be raced deterministically).
  TrainingState late = StateAt(5, 0);
  late.extra = {{"backup_gang", 1}};
  ASSERT_TRUE(WriteStateFile(scoped + "/backup-2", late, "").ok());
  auto r = gang2.Restore(kFingerprint);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().message();
  EXPECT_EQ((*r)->epoch, 1) << "restored the stale chief's backup";
  EXPECT_NE(log.Stderr().find("skipping backup " + scoped +
                              "/backup-2: written by gang 1's chief after gang 2 claimed the "
                              "directory (a stale chief)"),
            std::string::npos)
      << log.Stderr();
  // Gang 2 crashes before it writes a backup; gang 3 removes the stale one and resumes from
  // what gang 2 resumed from.
  BackupManager gang3(dir.path(), log.log(), {kUid, 3});
  ASSERT_TRUE(gang3.Claim().ok());
  EXPECT_EQ(Names(scoped), (std::vector<std::string>{"backup-1", "fence"}));
  r = gang3.Restore(kFingerprint);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().message();
  EXPECT_EQ((*r)->epoch, 1);
  // What gang 3 writes is restored after it.
  ASSERT_TRUE(gang3.Save(StateAt(3, 0)).ok());
  BackupManager gang4(dir.path(), log.log(), {kUid, 4});
  ASSERT_TRUE(gang4.Claim().ok());
  r = gang4.Restore(kFingerprint);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().message();
  EXPECT_EQ((*r)->epoch, 3);
}

TEST(BackupFencing, BackupsAreScopedToTheJobsUid) {
  TempDir dir;
  BackupManager a(dir.path(), nullptr, {"uid-a", 0});
  BackupManager b(dir.path(), nullptr, {"uid-b", 0});
  ASSERT_TRUE(a.Claim().ok());
  ASSERT_TRUE(a.Save(StateAt(1, 0)).ok());
  ASSERT_TRUE(b.Claim().ok());
  auto r = b.Restore(kFingerprint);  // another job's backup is not this job's
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->has_value());
  ASSERT_TRUE(b.Save(StateAt(7, 0)).ok());
  ASSERT_TRUE(b.Save(StateAt(8, 0)).ok());
  ASSERT_TRUE(b.Save(StateAt(9, 0)).ok());  // keeps its newest two, touches nothing of a's
  r = a.Restore(kFingerprint);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().message();
  EXPECT_EQ((*r)->epoch, 1);
  ASSERT_TRUE(b.Delete().ok());
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"job-uid-a"}));
  EXPECT_TRUE(BackupManager::ValidJobUid(kUid));
  for (const char* bad : {"", "../x", "a/b", "a b", "."}) {
    EXPECT_FALSE(BackupManager::ValidJobUid(bad)) << bad;
  }
}

TEST(BackupFencing, AWriterRemovesOnlyItsOwnTempFiles) {
  TempDir dir;
  BackupManager gang2(dir.path(), nullptr, {kUid, 2});
  ASSERT_TRUE(gang2.Claim().ok());
  const std::string scoped = dir.Join(std::string("job-") + kUid);
  // In flight: a write by another writer of this gang and one by an older gang's chief.
  WriteBytes(scoped + "/.backup-1.tmp.g2-77-0123456789abcdef.Xy12Zz", "in flight");
  WriteBytes(scoped + "/.backup-1.tmp.g1-66-0123456789abcdef.Ab12Cd", "debris");
  ASSERT_TRUE(gang2.Save(StateAt(1, 0)).ok());
  EXPECT_EQ(Names(scoped), (std::vector<std::string>{".backup-1.tmp.g1-66-0123456789abcdef.Ab12Cd",
                                                     ".backup-1.tmp.g2-77-0123456789abcdef.Xy12Zz",
                                                     "backup-1", "fence"}));
  // Nor does a newer gang's claim: the older chief may still be mid-write (it is fenced out:
  // what it renames in is never restored).
  BackupManager gang3(dir.path(), nullptr, {kUid, 3});
  ASSERT_TRUE(gang3.Claim().ok());
  ASSERT_TRUE(gang3.Save(StateAt(2, 0)).ok());
  EXPECT_EQ(Names(scoped), (std::vector<std::string>{".backup-1.tmp.g1-66-0123456789abcdef.Ab12Cd",
                                                     ".backup-1.tmp.g2-77-0123456789abcdef.Xy12Zz",
                                                     "backup-1", "backup-2", "fence"}));
}

TEST(BackupFencing, OutOfSpaceIsResourceExhaustedAndLeavesThePreviousBackup) {
  SmallTmpfs disk(256 << 10);
  if (!disk.error().empty()) GTEST_SKIP() << disk.error();
  BackupManager m(disk.path(), nullptr, {kUid, 0});
  ASSERT_TRUE(m.Claim().ok());
  ASSERT_TRUE(m.Save(StateAt(1, 0)).ok());  // small: fits
  TrainingState big = StateAt(2, 0);
  big.tensors = {{"weights", std::vector<float>(1 << 20, 1.0f)}};  // 4 MiB: does not
  Status full = m.Save(big);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("No space left on device"), std::string::npos) << full.message();
  // No temporary file left behind, and the previous backup is intact.
  EXPECT_EQ(Names(disk.Join(std::string("job-") + kUid)),
            (std::vector<std::string>{"backup-1", "fence"}));
  auto r = m.Restore(kFingerprint);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().message();
  EXPECT_EQ((*r)->epoch, 1);
}

}  // namespace
}  // namespace tj::checkpoint

namespace tj::checkpoint {
namespace {

// Backups lie on a volume that others may write: only what the job's key wrote is restored.
const cluster::GangIdentity kKeyed{"uid-1", 0, "the job's key"};

TEST(BackupAuthentication, APlantedBackupIsSkippedAndThePreviousRestored) {
  TempDir dir;
  CapturedLog log;
  BackupManager backups(dir.path(), log.log(), kKeyed);
  ASSERT_TRUE(backups.Claim().ok());
  ASSERT_TRUE(backups.Save(StateAt(1, 0)).ok());
  // Someone without the key writes a newer backup with the fingerprint the job expects.
  TrainingState planted = StateAt(99, 0);
  planted.extra = {{"backup_gang", 0}};
  ASSERT_TRUE(WriteStateFile(backups.dir() + "/backup-2", planted, "guessed key").ok());
  auto r = backups.Restore(kFingerprint);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->epoch, 1);
  EXPECT_NE(log.Stderr().find("backup-2: not signed with this job's key"), std::string::npos)
      << log.Stderr();
}

TEST(BackupAuthentication, DeepOversizedAndForeignFilesAreSkippedNeverACrash) {
  TempDir dir;
  CapturedLog log;
  BackupManager backups(dir.path(), log.log(), kKeyed);
  ASSERT_TRUE(backups.Claim().ok());
  ASSERT_TRUE(backups.Save(StateAt(1, 0)).ok());
  // A header nested a million deep (with a SHA-256 that matches), and a file of 1 GiB.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  std::string nested = std::string(kStateFileMagic, 8) + std::string("\x02\0\0\0", 4);
  const uint64_t h = deep.size();
  for (int i = 0; i < 8; ++i) nested.push_back(static_cast<char>(h >> (8 * i)));
  nested += deep;
  const Digest d = Sha256Of(nested.data(), nested.size());
  nested.append(reinterpret_cast<const char*>(d.data()), d.size());
  nested.append(32, '\0');
  WriteBytes(backups.dir() + "/backup-2", nested);
  WriteBytes(backups.dir() + "/backup-3", "");
  fs::resize_file(backups.dir() + "/backup-3", size_t{1} << 30);
  auto r = backups.Restore(kFingerprint);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->epoch, 1);
  const std::string warnings = log.Stderr();
  EXPECT_NE(warnings.find("backup-3: too large: 1073741824 bytes"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("backup-2: not signed with this job's key"), std::string::npos)
      << warnings;
}

TEST(BackupAuthentication, OnlyBackupsUnderAnotherKeyIsAFreshStartSaidLoudly) {
  TempDir dir;
  BackupManager writer(dir.path(), nullptr, {"uid-1", 0, "the key before the Secret was remade"});
  ASSERT_TRUE(writer.Save(StateAt(1, 0)).ok());
  CapturedLog log;
  BackupManager backups(dir.path(), log.log(), kKeyed);
  auto r = backups.Restore(kFingerprint);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->has_value());
  EXPECT_NE(log.Stderr().find("no backup in " + backups.dir() +
                              " is signed with this job's key (1 under another key)"),
            std::string::npos)
      << log.Stderr();
  EXPECT_NE(log.Stderr().find("Starting afresh"), std::string::npos);
}

TEST(BackupAuthentication, AForeignAndACorruptBackupIsStillAnError) {
  TempDir dir;
  BackupManager writer(dir.path(), nullptr, {"uid-1", 0, "another key"});
  ASSERT_TRUE(writer.Save(StateAt(1, 0)).ok());
  BackupManager backups(dir.path(), nullptr, kKeyed);
  WriteBytes(backups.dir() + "/backup-2", "torn");
  auto r = backups.Restore(kFingerprint);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("remove the directory to start over"), std::string::npos)
      << r.status().message();
}

TEST(BackupAuthentication, AFenceNestedDeepOrHugeIsAnErrorNotACrash) {
  TempDir dir;
  BackupManager backups(dir.path(), nullptr, kKeyed);
  fs::create_directories(backups.dir());
  const std::string path = backups.dir() + "/fence";
  const std::vector<std::pair<std::string, std::string>> fences = {
      {std::string(2000, '[') + std::string(2000, ']'), "not {\"gang\": N, \"base_seq\": N}"},
      {std::string(1000000, '[') + std::string(1000000, ']'), "too large: 2000000 bytes"},
      {std::string(1 << 20, ' '), "too large: 1048576 bytes"}};
  for (const auto& [fence, reason] : fences) {
    WriteBytes(path, fence);
    Status s = backups.Claim();
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("reading backup fence: " + path + ": " + reason), std::string::npos)
        << s.message();
  }
}

}  // namespace
}  // namespace tj::checkpoint
