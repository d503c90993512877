#include "kube/object_meta.h"

#include <gtest/gtest.h>

namespace tj::kube {
namespace {

using nlohmann::json;

TEST(ObjectMeta, DeletionTimestampSetMeansBeingDeleted) {
  EXPECT_TRUE(
      IsBeingDeleted(json::parse(R"({"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z"}})")));
  EXPECT_FALSE(IsBeingDeleted(json::parse(R"({"metadata":{"name":"a"}})")));
  EXPECT_FALSE(IsBeingDeleted(json::parse(R"({"metadata":{"deletionTimestamp":null}})")));
}

TEST(ObjectMeta, AnyShapeReadsAsAbsentNeverThrows) {
  for (const char* text :
       {R"(null)", R"([])", R"("pod")", R"({})", R"({"metadata":null})", R"({"metadata":[1]})",
        R"({"metadata":{"labels":"x"}})", R"({"metadata":{"labels":{"k":7}}})"}) {
    const json o = json::parse(text);
    EXPECT_FALSE(IsBeingDeleted(o)) << text;
    EXPECT_EQ(LabelOf(o, "k"), "") << text;
    EXPECT_TRUE(MetadataOf(o).is_object()) << text;
    EXPECT_EQ(TextOf(o, "metadata"), "") << text;
  }
}

TEST(ObjectMeta, TextOfReadsOnlyAString) {
  const json o = json::parse(R"({"s":"x","n":7,"z":null,"a":["x"],"o":{"s":"y"}})");
  EXPECT_EQ(TextOf(o, "s"), "x");
  for (const char* key : {"n", "z", "a", "o", "absent"}) EXPECT_EQ(TextOf(o, key), "") << key;
  EXPECT_EQ(TextOf(o["a"], "s"), "");  // not an object
}

TEST(ObjectMeta, LabelOfReadsAStringLabel) {
  const json o = json::parse(R"({"metadata":{"labels":{"tjo.dev/replica-type":"worker"}}})");
  EXPECT_EQ(LabelOf(o, "tjo.dev/replica-type"), "worker");
  EXPECT_EQ(LabelOf(o, "other"), "");
  EXPECT_EQ(MetadataOf(o)["labels"].size(), 1u);
}

}  // namespace
}  // namespace tj::kube
