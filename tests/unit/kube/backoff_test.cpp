#include "kube/backoff.h"

#include <gtest/gtest.h>

namespace tj::kube {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ItemExponentialBackoff, ClientGoSequencePerItem) {
  ItemExponentialBackoff b;  // 5 ms .. 1000 s
  EXPECT_EQ(b.When("a"), milliseconds(5));
  EXPECT_EQ(b.When("a"), milliseconds(10));
  EXPECT_EQ(b.When("a"), milliseconds(20));
  EXPECT_EQ(b.When("b"), milliseconds(5));  // items are independent
  EXPECT_EQ(b.NumRequeues("a"), 3);
  b.Forget("a");
  EXPECT_EQ(b.NumRequeues("a"), 0);
  EXPECT_EQ(b.When("a"), milliseconds(5));
  for (int i = 0; i < 30; ++i) b.When("c");
  EXPECT_EQ(b.When("c"), seconds(1000));
}

}  // namespace
}  // namespace tj::kube
