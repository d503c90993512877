#include "trainer/checkpoint/backup_manager.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "tests/unit/trainer/checkpoint/temp_dir.h"

namespace tj::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::ReadBytes;
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

// Captures what an EventLog writes to stderr.
class CapturedLog {
 public:
  CapturedLog() : out_(std::tmpfile()), err_(std::tmpfile()), log_(LogFormat::kJson, out_, err_) {}
  ~CapturedLog() {
    std::fclose(out_);
    std::fclose(err_);
  }
  EventLog* log() { return &log_; }
  std::string Stderr() {
    std::fflush(err_);
    std::rewind(err_);
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, err_)) > 0) s.append(buf, n);
    return s;
  }

 private:
  FILE* out_;
  FILE* err_;
  EventLog log_;
};

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

TEST(BackupManagerTest, LeftoverTempFilesAreIgnoredByRestoreAndCleanedBySave) {
  TempDir dir;
  BackupManager m(dir.path(), nullptr);
  ASSERT_TRUE(m.Save(StateAt(1, 0)).ok());
  // A crash mid-write of backup-2 leaves its temporary file behind.
  WriteBytes(dir.Join(".backup-2.tmp.Ab12Cd"), ReadBytes(dir.Join("backup-1")).substr(0, 50));
  auto r = m.Restore(kFingerprint);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().message();
  EXPECT_EQ((*r)->epoch, 1);
  ASSERT_TRUE(m.Save(StateAt(2, 0)).ok());
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"backup-1", "backup-2"}));
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
  WriteBytes(dir.Join(".backup-3.tmp.Ab12Cd"), "partial");
  WriteBytes(dir.Join("README"), "user file");
  ASSERT_TRUE(m.Delete().ok());
  EXPECT_EQ(Names(dir.path()), (std::vector<std::string>{"README"}));
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

}  // namespace
}  // namespace tj::checkpoint
