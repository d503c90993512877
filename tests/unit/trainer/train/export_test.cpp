// The exported model directory (--export-dir, read back with --model) lies on a volume others
// may write: what is planted there is an error naming the file, never a wait.
#include "trainer/train/export.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "tests/support/planted_file.h"
#include "tests/support/temp_dir.h"
#include "trainer/nn/model.h"

namespace tj::train {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using tj::testing::PlantFifo;
using tj::testing::ReturnsWithin;
using tj::testing::TempDir;
using tj::testing::WriteBytes;

TEST(ExportedModel, RoundTrips) {
  TempDir dir;
  const std::vector<float> weights(nn::Layout::kCount, 0.25f);
  ASSERT_TRUE(ExportModel(dir.path(), weights, 3).ok());
  auto back = LoadExportedModel(dir.path());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, weights);
}

TEST(ExportedModel, AFifoForEitherFileIsAnErrorNamingItNotAHang) {
  for (const char* name : {"architecture.json", "weights.tjckpt"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    ASSERT_TRUE(ExportModel(dir.path(), std::vector<float>(nn::Layout::kCount, 0.5f), 1).ok());
    const std::string fifo = dir.Join(name);
    fs::remove(fifo);
    PlantFifo(fifo);
    StatusOr<std::vector<float>> r = Status::Error("not run");
    ASSERT_TRUE(ReturnsWithin(5s, {fifo}, [&] { r = LoadExportedModel(dir.path()); }))
        << "LoadExportedModel waited on the FIFO " << fifo;
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(fifo + ": a FIFO, not a regular file"), std::string::npos)
        << r.status().message();
  }
}

TEST(ExportedModel, AWeightsFileOutsideTheDirectoryOrOfTheWrongTypeIsRefused) {
  TempDir dir;
  ASSERT_TRUE(ExportModel(dir.path(), std::vector<float>(nn::Layout::kCount, 0.5f), 1).ok());
  nlohmann::json arch =
      nlohmann::json::parse(tj::testing::ReadBytes(dir.Join("architecture.json")));
  for (const nlohmann::json& weights_file :
       {nlohmann::json("../elsewhere/weights.tjckpt"), nlohmann::json(".."), nlohmann::json(7)}) {
    arch["weights_file"] = weights_file;
    WriteBytes(dir.Join("architecture.json"), arch.dump());
    auto r = LoadExportedModel(dir.path());
    ASSERT_FALSE(r.ok()) << weights_file;
    EXPECT_NE(r.status().message().find(dir.Join("architecture.json")), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace tj::train
