#include "trainer/observe/status_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "common/prometheus_text.h"
#include "tests/support/http_fetch.h"
#include "tests/support/subprocess.h"

namespace tj::observe {
namespace {

using ::tj::testing::Fetch;
using ::tj::testing::FreePort;

TEST(StatusServerTest, AnswersStatusAndMetricsOverARealSocket) {
  const int port = FreePort();
  std::atomic<int> epoch{1};
  StatusServer server(
      port,
      [&] {
        return nlohmann::json{{"role", "chief"}, {"epoch", epoch.load()}, {"total_epochs", 3}};
      },
      [&] {
        PrometheusText m;
        m.Gauge("tj_trainer_epoch", "Epochs completed.", epoch.load());
        return m.str();
      },
      "127.0.0.1");
  ASSERT_TRUE(server.Start().ok());
  EXPECT_TRUE(server.running());

  auto status = Fetch(port, "GET", "/status");
  ASSERT_EQ(status.code, 200) << status.head;
  EXPECT_NE(status.head.find("application/json"), std::string::npos) << status.head;
  auto j = nlohmann::json::parse(status.body);
  EXPECT_EQ(j["role"], "chief");
  EXPECT_EQ(j["epoch"], 1);

  epoch = 2;  // answers reflect the state at request time
  auto metrics = Fetch(port, "GET", "/metrics");
  ASSERT_EQ(metrics.code, 200) << metrics.head;
  EXPECT_NE(metrics.head.find("text/plain; version=0.0.4"), std::string::npos) << metrics.head;
  EXPECT_EQ(metrics.body,
            "# HELP tj_trainer_epoch Epochs completed.\n# TYPE tj_trainer_epoch gauge\n"
            "tj_trainer_epoch 2\n");

  EXPECT_EQ(Fetch(port, "GET", "/").code, 404);
  EXPECT_EQ(Fetch(port, "GET", "/statusx").code, 404);
  EXPECT_EQ(Fetch(port, "POST", "/status").code, 405);

  server.Stop();
  EXPECT_FALSE(server.running());
  EXPECT_EQ(Fetch(port, "GET", "/status").code, 0);  // nobody listens any more
  server.Stop();                                     // idempotent
}

TEST(StatusServerTest, ACallbackThatThrowsIsA500NotACrash) {
  const int port = FreePort();
  StatusServer server(
      port, []() -> nlohmann::json { throw std::runtime_error("boom"); },
      [] { return nlohmann::json::parse("{").dump(); }, "127.0.0.1");
  ASSERT_TRUE(server.Start().ok());
  auto a = Fetch(port, "GET", "/status");
  EXPECT_EQ(a.code, 500);
  EXPECT_NE(a.body.find("boom"), std::string::npos);
  EXPECT_EQ(Fetch(port, "GET", "/metrics").code, 500);
}

TEST(StatusServerTest, PortZeroIsDisabled) {
  StatusServer server(
      0, [] { return nlohmann::json::object(); }, [] { return std::string(); });
  ASSERT_TRUE(server.Start().ok());
  EXPECT_FALSE(server.running());
  server.Stop();
}

TEST(StatusServerTest, APortInUseIsAnErrorNamingThePort) {
  // Hold a listening socket on a port, on every address.
  int port = 0;
  const int fd = ::tj::testing::ListenOnFreePort(INADDR_ANY, &port, 1);
  ASSERT_GE(fd, 0);

  StatusServer server(
      port, [] { return nlohmann::json::object(); }, [] { return std::string(); });
  Status s = server.Start();
  ::close(fd);
  ASSERT_FALSE(s.ok());
  std::printf("the error reads: %s\n", s.message().c_str());
  EXPECT_NE(s.message().find("cannot listen on port " + std::to_string(port)), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("another process listens there"), std::string::npos) << s.message();
  EXPECT_FALSE(server.running());
}

TEST(StatusServerTest, DefaultBindsEveryAddress) {
  const int port = FreePort();
  StatusServer server(
      port,
      [] {
        return nlohmann::json{{"ok", true}};
      },
      [] { return std::string(); });
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(Fetch(port, "GET", "/status").code, 200);
}

TEST(StatusServerTest, AnInvalidPortIsAnError) {
  StatusServer server(
      70000, [] { return nlohmann::json::object(); }, [] { return std::string(); });
  Status s = server.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("port 70000"), std::string::npos) << s.message();
}

TEST(StatusServerTest, RestartsOnTheSamePortAfterStop) {
  const int port = FreePort();
  StatusServer a(
      port,
      [] {
        return nlohmann::json{{"n", 1}};
      },
      [] { return std::string(); }, "127.0.0.1");
  ASSERT_TRUE(a.Start().ok());
  a.Stop();
  StatusServer b(
      port,
      [] {
        return nlohmann::json{{"n", 2}};
      },
      [] { return std::string(); }, "127.0.0.1");
  ASSERT_TRUE(b.Start().ok());
  EXPECT_EQ(nlohmann::json::parse(Fetch(port, "GET", "/status").body)["n"], 2);
}

TEST(PrometheusTextTest, DeclaresEachNameOnceAndEscapesLabels) {
  PrometheusText m;
  m.Counter("tj_steps_total", "Steps.", 1200);
  m.Gauge("tj_loss", "Loss.", 0.25, {{"split", "train"}});
  m.Gauge("tj_loss", "Loss.", 0.5, {{"split", "e\"v\\a\nl"}});
  m.Gauge("tj_nan", "Not a number.", std::nan(""));
  EXPECT_EQ(m.str(),
            "# HELP tj_steps_total Steps.\n# TYPE tj_steps_total counter\ntj_steps_total 1200\n"
            "# HELP tj_loss Loss.\n# TYPE tj_loss gauge\ntj_loss{split=\"train\"} 0.25\n"
            "tj_loss{split=\"e\\\"v\\\\a\\nl\"} 0.5\n"
            "# HELP tj_nan Not a number.\n# TYPE tj_nan gauge\ntj_nan NaN\n");
  EXPECT_EQ(PrometheusText::FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(PrometheusText::FormatValue(-1.0 / 0.0), "-Inf");
}

}  // namespace
}  // namespace tj::observe
