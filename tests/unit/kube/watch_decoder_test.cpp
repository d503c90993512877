#include "kube/watch_decoder.h"

#include <gtest/gtest.h>

#include <vector>

namespace tj::kube {
namespace {

const std::string kStream =
    R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"10"}}})"
    "\n"
    R"({"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"11"}}})"
    "\r\n"
    R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"15"}}})"
    "\n"
    R"j({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (40)"}})j"
    "\n";

std::vector<WatchEvent> Decode(const std::vector<std::string>& chunks, int* bad = nullptr) {
  WatchDecoder d;
  std::vector<WatchEvent> out;
  for (const auto& c : chunks) {
    d.Feed(
        c,
        [&](const WatchEvent& e) {
          out.push_back(e);
          return true;
        },
        [&](const ApiError&) {
          if (bad) ++*bad;
        });
  }
  return out;
}

TEST(WatchDecoder, EveryChunkingGivesTheSameEvents) {
  for (size_t size : {1u, 2u, 7u, 64u, 100000u}) {
    std::vector<std::string> chunks;
    for (size_t i = 0; i < kStream.size(); i += size) chunks.push_back(kStream.substr(i, size));
    auto ev = Decode(chunks);
    ASSERT_EQ(ev.size(), 4u) << "chunk size " << size;
    EXPECT_EQ(ev[0].type, WatchEvent::Type::kAdded);
    EXPECT_EQ(ev[0].ResourceVersion(), "10");
    EXPECT_EQ(ev[1].type, WatchEvent::Type::kModified);
    EXPECT_EQ(ev[2].type, WatchEvent::Type::kBookmark);
    EXPECT_EQ(ev[2].ResourceVersion(), "15");
    EXPECT_EQ(ev[3].type, WatchEvent::Type::kError);
    ApiError e = ev[3].AsError();
    EXPECT_EQ(e.code, 410);
    EXPECT_TRUE(IsGone(e));
  }
}

TEST(WatchDecoder, SkipsTheObjectsManagedFieldsAndNothingElse) {
  auto ev = ParseWatchEvent(
      R"({"type":"ADDED","object":{"metadata":{"name":"a","managedFields":[{"manager":"m",)"
      R"("fieldsV1":{"f:spec":{}}}],"labels":{"managedFields":"x"}},)"
      R"("spec":{"managedFields":1}}})");
  ASSERT_TRUE(ev.ok()) << ev.error().ToString();
  EXPECT_EQ(ev->object,
            nlohmann::json::parse(R"({"metadata":{"name":"a","labels":)"
                                  R"({"managedFields":"x"}},"spec":{"managedFields":1}})"));
}

TEST(WatchDecoder, KeepsAnIncompleteLineForTheNextChunk) {
  WatchDecoder d;
  int n = 0;
  d.Feed(R"({"type":"ADDED","obj)", [&](const WatchEvent&) { return ++n, true; },
         [](const ApiError&) {});
  EXPECT_EQ(n, 0);
  EXPECT_GT(d.buffered(), 0u);
  d.Feed(
      "ect\":{}}\n", [&](const WatchEvent&) { return ++n, true; }, [](const ApiError&) {});
  EXPECT_EQ(n, 1);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(WatchDecoder, BadLinesAreReportedAndSkipped) {
  int bad = 0;
  auto ev = Decode({"not json\n",
                    R"({"type":"WEIRD","object":{}})"
                    "\n",
                    R"({"type":"DELETED","object":{"metadata":{"name":"x"}}})"
                    "\n"},
                   &bad);
  EXPECT_EQ(bad, 2);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, WatchEvent::Type::kDeleted);
}

TEST(WatchDecoder, StopsWhenTheHandlerSaysSo) {
  WatchDecoder d;
  int n = 0;
  bool go_on = d.Feed(
      kStream, [&](const WatchEvent&) { return ++n < 2; }, [](const ApiError&) {});
  EXPECT_FALSE(go_on);
  EXPECT_EQ(n, 2);
}

}  // namespace
}  // namespace tj::kube
