#include "trainer/checkpoint/state_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/sha256.h"
#include "tests/support/temp_dir.h"
#include "trainer/checkpoint/atomic_file.h"

namespace tj::checkpoint {
namespace {

using testing::TempDir;
using testing::WriteBytes;

constexpr std::string_view kKey = "the job's key";

TrainingState SampleState() {
  TrainingState s;
  s.fingerprint = {
      {"model", "cnn-32-64-10"}, {"batch_size", 64}, {"workers", 2}, {"dataset", "sha256:abcd"}};
  s.epoch = 3;
  s.step = 117;
  s.optimizer_iterations = 3 * 938 + 117;
  s.seed = 0xfedcba9876543210ULL;  // above INT64_MAX: must survive JSON
  s.extra = {{"loss_sum", 12.5}, {"correct", 1000}};
  std::vector<float> w(1000), m(1000), v(1000);
  for (int i = 0; i < 1000; ++i) {
    w[i] = 0.001f * static_cast<float>(i) - 0.37f;
    m[i] = -1e-7f * static_cast<float>(i);
    v[i] = 1e-30f * static_cast<float>(i + 1);
  }
  w[5] = std::numeric_limits<float>::infinity();
  w[6] = -0.0f;
  w[7] = std::numeric_limits<float>::denorm_min();
  s.tensors = {{"weights", w}, {"adam_m", m}, {"adam_v", v}, {"empty", {}}};
  return s;
}

std::string Encoded() {
  auto bytes = EncodeState(SampleState(), kKey);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  return *bytes;
}

// Header length from the preamble (offset 12, little-endian uint64).
size_t HeaderLength(const std::string& b) {
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i)
    h |= static_cast<uint64_t>(static_cast<uint8_t>(b[12 + i])) << (8 * i);
  return h;
}

// Builds a file with a correct digest and HMAC under `key` around arbitrary contents, as a
// buggy writer (or one who holds the key) might.
std::string WithDigest(std::string body, std::string_view key = kKey) {
  Digest d = Sha256Of(body.data(), body.size());
  body.append(reinterpret_cast<const char*>(d.data()), d.size());
  auto mac = HmacSha256(key, body.data(), body.size());
  EXPECT_TRUE(mac.ok());
  body.append(reinterpret_cast<const char*>(mac->data()), mac->size());
  return body;
}

std::string Preamble(uint32_t version, uint64_t header_len) {
  std::string out(kStateFileMagic, 8);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(version >> (8 * i)));
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(header_len >> (8 * i)));
  return out;
}

TEST(StateFileTest, RoundTripsEveryFieldBitwise) {
  TempDir dir;
  const std::string path = dir.Join("state");
  TrainingState s = SampleState();
  ASSERT_TRUE(WriteStateFile(path, s, kKey).ok());
  auto back = ReadStateFile(path, kKey);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, s);
  // Bitwise, not just ==: -0.0f and +0.0f compare equal.
  const auto* w = back->FindTensor("weights");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(std::memcmp(w->data(), s.tensors[0].second.data(), w->size() * 4), 0);
  EXPECT_TRUE(std::signbit((*w)[6]));
  EXPECT_EQ(back->seed, 0xfedcba9876543210ULL);
  EXPECT_EQ(back->FindTensor("absent"), nullptr);
}

TEST(StateFileTest, LayoutIsAsDocumented) {
  const std::string b = Encoded();
  EXPECT_EQ(b.substr(0, 8), std::string(kStateFileMagic, 8));
  EXPECT_EQ(static_cast<uint8_t>(b[8]), kStateFileVersion);
  const size_t h = HeaderLength(b);
  auto header = nlohmann::json::parse(b.substr(20, h));
  EXPECT_EQ(header["epoch"], 3);
  EXPECT_EQ(header["data_bytes"], 3000 * 4);
  EXPECT_EQ(b.size(), 20 + h + 3000 * 4 + 64);
  // The weights start right after the header, little-endian float32.
  float first;
  std::memcpy(&first, b.data() + 20 + h, 4);
  EXPECT_EQ(first, -0.37f);
  // The SHA-256 of everything before it, then the HMAC under the key of everything before it.
  Digest d = Sha256Of(b.data(), b.size() - 64);
  EXPECT_EQ(std::memcmp(d.data(), b.data() + b.size() - 64, 32), 0);
  auto mac = HmacSha256(kKey, b.data(), b.size() - 32);
  ASSERT_TRUE(mac.ok());
  EXPECT_EQ(std::memcmp(mac->data(), b.data() + b.size() - 32, 32), 0);
}

TEST(StateFileTest, EmptyStateRoundTrips) {
  TempDir dir;
  TrainingState s;
  ASSERT_TRUE(WriteStateFile(dir.Join("s"), s, kKey).ok());
  auto back = ReadStateFile(dir.Join("s"), kKey);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, s);
}

TEST(StateFileTest, DuplicateTensorNamesAreRefused) {
  TrainingState s;
  s.tensors = {{"w", {1.0f}}, {"w", {2.0f}}};
  auto bytes = EncodeState(s, kKey);
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("\"w\" appears twice"), std::string::npos);
}

TEST(StateFileTest, MissingFileIsNamed) {
  TempDir dir;
  auto r = ReadStateFile(dir.Join("nope"), kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir.Join("nope")), std::string::npos);
  EXPECT_NE(r.status().message().find("missing"), std::string::npos);
}

TEST(StateFileTest, EmptyFileIsTruncated) {
  TempDir dir;
  WriteBytes(dir.Join("e"), "");
  auto r = ReadStateFile(dir.Join("e"), kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty file"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
}

TEST(StateFileTest, TruncationAtEveryRegionIsDetectedAsTruncated) {
  const std::string b = Encoded();
  const size_t h = HeaderLength(b);
  std::vector<size_t> cuts = {1,
                              4,
                              7,
                              8,
                              10,
                              12,
                              19,
                              20,
                              21,
                              20 + h / 2,
                              20 + h - 1,
                              20 + h,
                              20 + h + 1,
                              20 + h + 4000,
                              b.size() - 33,
                              b.size() - 32,
                              b.size() - 31,
                              b.size() - 1};
  for (size_t step = 1; step < b.size(); step += 997) cuts.push_back(step);
  for (size_t cut : cuts) {
    auto r = DecodeState(b.substr(0, cut), "f", kKey);
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos)
        << "cut at " << cut << ": " << r.status().message();
  }
}

TEST(StateFileTest, FlippedByteInDataOrDigestIsADigestMismatch) {
  const std::string b = Encoded();
  const size_t h = HeaderLength(b);
  for (size_t pos : {20 + h, 20 + h + 1234, b.size() - 65, b.size() - 64, b.size() - 33}) {
    std::string c = b;
    c[pos] ^= 0x01;
    auto r = DecodeState(c, "f", kKey);
    ASSERT_FALSE(r.ok()) << "flip at " << pos;
    EXPECT_NE(r.status().message().find("digest mismatch"), std::string::npos)
        << "flip at " << pos << ": " << r.status().message();
  }
}

TEST(StateFileTest, FlippedByteAnywhereIsAnError) {
  const std::string b = Encoded();
  for (size_t pos = 0; pos < b.size(); pos += (pos < 400 ? 1 : 211)) {
    std::string c = b;
    c[pos] ^= 0x20;
    auto r = DecodeState(c, "f", kKey);
    EXPECT_FALSE(r.ok()) << "flip at " << pos << " went undetected";
  }
}

TEST(StateFileTest, FlippedByteInHeaderIsDetected) {
  const std::string b = Encoded();
  const size_t h = HeaderLength(b);
  std::string c = b;
  c[20 + h / 2] ^= 0x01;
  auto r = DecodeState(c, "f", kKey);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_TRUE(m.find("digest mismatch") != std::string::npos ||
              m.find("truncated") != std::string::npos)
      << m;
}

TEST(StateFileTest, WrongMagicAndForeignFilesAreNotCheckpoints) {
  std::string c = Encoded();
  c[0] = 'X';
  for (const std::string& bytes :
       {c, std::string("{\"hello\": 1}\n"), std::string("PK\x03\x04"), std::string(100, '\0')}) {
    auto r = DecodeState(bytes, "f", kKey);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("not a tj-trainer checkpoint"), std::string::npos)
        << r.status().message();
  }
}

TEST(StateFileTest, UnsupportedVersionIsNamed) {
  std::string c = Encoded();
  c[8] = 3;
  auto r = DecodeState(c, "f", kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unsupported version 3"), std::string::npos)
      << r.status().message();
}

TEST(StateFileTest, MalformedHeaderWithValidDigestIsNamed) {
  const std::string header = "{not json";
  auto r = DecodeState(WithDigest(Preamble(kStateFileVersion, header.size()) + header), "f", kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("malformed header"), std::string::npos)
      << r.status().message();

  const std::string no_tensors =
      R"({"epoch":1,"step":0,"optimizer_iterations":0,"seed":0,"data_bytes":0})";
  r = DecodeState(WithDigest(Preamble(kStateFileVersion, no_tensors.size()) + no_tensors), "f",
                  kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("malformed header: no \"tensors\""), std::string::npos)
      << r.status().message();

  const std::string wrong_type =
      R"({"epoch":"one","step":0,"optimizer_iterations":0,"seed":0,"tensors":[],"data_bytes":0})";
  r = DecodeState(WithDigest(Preamble(kStateFileVersion, wrong_type.size()) + wrong_type), "f",
                  kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("malformed header"), std::string::npos)
      << r.status().message();
}

TEST(StateFileTest, TensorSizesNotMatchingTheFileAreNamed) {
  const std::string header =
      R"({"epoch":1,"step":0,"optimizer_iterations":0,"seed":0,"tensors":[{"name":"w","count":3}],"data_bytes":12})";
  // Only two floats of data follow, yet the digest is valid.
  auto r = DecodeState(
      WithDigest(Preamble(kStateFileVersion, header.size()) + header + std::string(8, '\0')), "f",
      kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor sizes do not match the file"), std::string::npos)
      << r.status().message();
  // Counts that overflow when multiplied by four.
  const std::string huge =
      R"({"epoch":1,"step":0,"optimizer_iterations":0,"seed":0,"tensors":[{"name":"w","count":4611686018427387905}],"data_bytes":4})";
  r = DecodeState(
      WithDigest(Preamble(kStateFileVersion, huge.size()) + huge + std::string(4, '\0')), "f",
      kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor sizes do not match the file"), std::string::npos)
      << r.status().message();
}

TEST(StateFileTest, ErrorsNameTheFile) {
  TempDir dir;
  WriteBytes(dir.Join("junk"), "junk");
  auto r = ReadStateFile(dir.Join("junk"), kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind(dir.Join("junk"), 0), 0u) << r.status().message();
}

TEST(StateFileTest, AtomicWriteLeavesNoTempFileAndReplacesTheOldFile) {
  TempDir dir;
  const std::string path = dir.Join("state");
  TrainingState s = SampleState();
  ASSERT_TRUE(WriteStateFile(path, s, kKey).ok());
  s.epoch = 4;
  ASSERT_TRUE(WriteStateFile(path, s, kKey).ok());
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_FALSE(IsTempFileName(e.path().filename().string())) << e.path();
  }
  EXPECT_EQ(files, 1);
  EXPECT_EQ(ReadStateFile(path, kKey)->epoch, 4);
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::others_read,
            std::filesystem::perms::others_read);
}

TEST(StateFileTest, WriteIntoMissingDirectoryFailsWithTheReason) {
  TempDir dir;
  Status s = WriteStateFile(dir.Join("no/such/dir/state"), SampleState(), kKey);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no/such/dir/state"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("temporary file"), std::string::npos) << s.message();
}

TEST(StateFileTest, TempFileNamesAreRecognisedAndRemoved) {
  EXPECT_TRUE(IsTempFileName(".backup-3.tmp.a1B2c3"));
  EXPECT_FALSE(IsTempFileName("backup-3"));
  EXPECT_FALSE(IsTempFileName("ckpt-final"));
  TempDir dir;
  WriteBytes(dir.Join(".ckpt-2.tmp.XYZabc"), "half");
  WriteBytes(dir.Join("ckpt-1"), "keep");
  ASSERT_TRUE(RemoveTempFiles(dir.path()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.Join(".ckpt-2.tmp.XYZabc")));
  EXPECT_TRUE(std::filesystem::exists(dir.Join("ckpt-1")));
  EXPECT_TRUE(RemoveTempFiles(dir.Join("absent")).ok());
}

TEST(DescribeMismatchTest, EqualFingerprintsMatch) {
  nlohmann::json a = {{"batch_size", 64}, {"model", {{"name", "cnn"}}}};
  EXPECT_EQ(DescribeMismatch(a, a), std::nullopt);
}

TEST(DescribeMismatchTest, NamesEveryDifferingFieldWithBothValues) {
  nlohmann::json run = {
      {"batch_size", 64}, {"workers", 2}, {"model", {{"name", "cnn"}}}, {"dataset", "fmnist"}};
  nlohmann::json backup = {
      {"batch_size", 32}, {"workers", 2}, {"model", {{"name", "mlp"}}}, {"seed_only_in_backup", 1}};
  auto d = DescribeMismatch(run, backup);
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->find("batch_size: backup has 32, this run has 64"), std::string::npos) << *d;
  EXPECT_NE(d->find("model.name: backup has \"mlp\", this run has \"cnn\""), std::string::npos)
      << *d;
  EXPECT_NE(d->find("dataset: backup has none, this run has \"fmnist\""), std::string::npos) << *d;
  EXPECT_NE(d->find("seed_only_in_backup: backup has 1, this run has none"), std::string::npos)
      << *d;
  EXPECT_EQ(d->find("workers"), std::string::npos) << *d;
}

TEST(DescribeMismatchTest, NonObjectsCompareAsAWhole) {
  auto d = DescribeMismatch(nlohmann::json("a"), nlohmann::json("b"));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, "fingerprint: backup has \"b\", this run has \"a\"");
}

}  // namespace
}  // namespace tj::checkpoint

namespace tj::checkpoint {
namespace {

// A state file on a shared volume is read only when this job's key wrote it.
TEST(StateFileAuthentication, AFileUnderAnotherKeyIsRefusedUnread) {
  auto foreign = EncodeState(SampleState(), "another job's key");
  ASSERT_TRUE(foreign.ok());
  auto r = DecodeState(*foreign, "backup-7", kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("backup-7: not signed with this job's key"),
            std::string::npos)
      << r.status().message();
  // A flipped byte of the HMAC is the same refusal; of the SHA-256 a digest mismatch.
  std::string c = Encoded();
  c[c.size() - 1] ^= 0x01;
  r = DecodeState(c, "f", kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not signed with this job's key"), std::string::npos);
  // A run without a key reads only files written without one.
  EXPECT_FALSE(DecodeState(Encoded(), "f", "").ok());
  auto keyless = EncodeState(SampleState(), "");
  ASSERT_TRUE(keyless.ok());
  EXPECT_TRUE(DecodeState(*keyless, "f", "").ok());
}

TEST(StateFileAuthentication, AFormatOneFileIsRefusedSayingWhatToDo) {
  const std::string header =
      R"({"epoch":1,"step":0,"optimizer_iterations":0,"seed":0,"tensors":[],"data_bytes":0})";
  std::string v1 = Preamble(1, header.size()) + header;
  const Digest d = Sha256Of(v1.data(), v1.size());
  v1.append(reinterpret_cast<const char*>(d.data()), d.size());
  auto r = DecodeState(v1, "backup-3", kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("backup-3: format 1, written by a tj-trainer before state "
                                      "files were authenticated"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("remove the file to start over"), std::string::npos);
}

TEST(StateFileAuthentication, AHeaderNestedDeeperThanTheBoundIsRefusedUnparsed) {
  // Even under the job's key: 100,000 levels in the fingerprint, which a comparison or a dump
  // would recurse through.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string header = R"({"fingerprint":)" + deep +
                             R"(,"epoch":1,"step":0,"optimizer_iterations":0,"seed":0,)"
                             R"("tensors":[],"data_bytes":0})";
  auto r = DecodeState(WithDigest(Preamble(kStateFileVersion, header.size()) + header), "f", kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("malformed header: nested 100001 deep, deeper than the 16"),
            std::string::npos)
      << r.status().message();
}

// On a digest mismatch nothing is authenticated: nothing the header says may be parsed or
// repeated (here it claims a terabyte of tensors, which a parse would report as truncation).
TEST(StateFileAuthentication, ADigestMismatchBelievesNothingOfTheHeader) {
  const std::string header =
      R"({"fingerprint":{"planted":true},"epoch":1,"step":0,"optimizer_iterations":0,"seed":0,)"
      R"("tensors":[{"name":"w","count":250000000000}],"data_bytes":1000000000000})";
  std::string forged = WithDigest(Preamble(kStateFileVersion, header.size()) + header + "data");
  forged[forged.size() - 40] ^= 0x01;  // a byte of the SHA-256
  auto r = DecodeState(forged, "backup-3", kKey);
  ASSERT_FALSE(r.ok());
  const std::string m = r.status().message();
  EXPECT_NE(m.find("backup-3: digest mismatch"), std::string::npos) << m;
  EXPECT_EQ(m.find("1000000000"), std::string::npos) << "a number from the header: " << m;
  EXPECT_EQ(m.find("header describes"), std::string::npos) << m;
  // Nested a million deep, it is refused as fast as a flat one: never scanned.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  std::string forged_deep = WithDigest(Preamble(kStateFileVersion, deep.size()) + deep);
  forged_deep[forged_deep.size() - 40] ^= 0x01;
  r = DecodeState(forged_deep, "backup-4", kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("backup-4: digest mismatch"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("malformed header"), std::string::npos)
      << r.status().message();
}

TEST(StateFileAuthentication, AFileLargerThanTheBoundIsNotRead) {
  TempDir dir;
  const std::string path = dir.Join("huge");
  WriteBytes(path, "");
  std::filesystem::resize_file(path, kMaxStateFileBytes + 1);  // sparse: nothing is written
  auto r = ReadStateFile(path, kKey);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path + ": too large: 67108865 bytes"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace tj::checkpoint
