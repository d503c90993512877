#include "common/http_server.h"

#include <gtest/gtest.h>

namespace tj {
namespace {

TEST(ParseListenAddress, HostPortColonPortAndOff) {
  auto a = ParseListenAddress("127.0.0.1:8080");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8080);
  a = ParseListenAddress(":8081");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 8081);
  a = ParseListenAddress("9090");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->port, 9090);
  for (const char* off : {"0", "", ":0"}) {
    a = ParseListenAddress(off);
    ASSERT_TRUE(a.ok()) << off;
    EXPECT_EQ(a->port, 0) << off;
  }
}

TEST(ParseListenAddress, ABadPortNamesTheAddressAndTheRange) {
  for (const char* bad : {":http", "host:80x", ":65536", ":-1", "1.2.3.4:"}) {
    auto a = ParseListenAddress(bad);
    if (std::string(bad) == "1.2.3.4:") {  // an empty port is "off", as "0" is
      ASSERT_TRUE(a.ok());
      EXPECT_EQ(a->port, 0);
      continue;
    }
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_NE(a.status().message().find(std::string("\"") + bad + "\""), std::string::npos)
        << a.status().message();
    EXPECT_NE(a.status().message().find("65535"), std::string::npos) << a.status().message();
  }
}

TEST(HttpServer, PortZeroDoesNotListenAndAnInvalidPortIsAnError) {
  HttpServer off("0.0.0.0", 0, {});
  ASSERT_TRUE(off.Start().ok());
  EXPECT_FALSE(off.running());
  HttpServer bad("0.0.0.0", 70000, {});
  Status s = bad.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("port 70000"), std::string::npos) << s.message();
  EXPECT_FALSE(bad.running());
}

}  // namespace
}  // namespace tj
