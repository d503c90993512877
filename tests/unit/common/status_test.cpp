#include "common/status.h"

#include <gtest/gtest.h>

namespace tj {
namespace {

TEST(Status, OkHasCodeOkAndErrorsDefaultToUnknown) {
  EXPECT_EQ(Status::Ok().code(), StatusCode::kOk);
  EXPECT_EQ(Status().message(), "OK");
  Status e = Status::Error("disk full");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code(), StatusCode::kUnknown);
}

TEST(Status, ContextIsPrefixedAndTheCodeKept) {
  Status e = Status::Error(StatusCode::kDeadlineExceeded, "timed out reading")
                 .WithContext("reading the chief's hello")
                 .WithContext("rendezvous with chief a:1");
  EXPECT_EQ(e.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(e.message(), "rendezvous with chief a:1: reading the chief's hello: timed out reading");
  EXPECT_TRUE(Status::Ok().WithContext("anything").ok());
}

TEST(Status, StatusOrCarriesTheCode) {
  StatusOr<int> v = Status::Error(StatusCode::kPermissionDenied, "wrong key");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace tj
