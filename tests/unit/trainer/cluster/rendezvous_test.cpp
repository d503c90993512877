// The rendezvous store in one process: challenge/answer logic, set/get/wait through a real
// server and client on loopback, wrong keys refused (and logged) without disturbing the good
// connections, timeouts that bound every wait.
#include "trainer/cluster/rendezvous.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace tj::cluster {
namespace {

using std::chrono::milliseconds;

std::string ReadAll(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(ChallengeAnswer, BindsKeyChallengeAndTaskName) {
  Challenge c{};
  c[0] = 7;
  const ChallengeAnswer a = AnswerChallenge("key", c, "worker 1");
  EXPECT_TRUE(VerifyChallengeAnswer("key", c, "worker 1", a));
  EXPECT_FALSE(VerifyChallengeAnswer("kez", c, "worker 1", a));
  EXPECT_FALSE(VerifyChallengeAnswer("key", c, "worker 2", a));
  Challenge other = c;
  other[31] ^= 1;
  EXPECT_FALSE(VerifyChallengeAnswer("key", other, "worker 1", a));
  ChallengeAnswer flipped = a;
  flipped[5] ^= 0x80;
  EXPECT_FALSE(VerifyChallengeAnswer("key", c, "worker 1", flipped));
}

TEST(ChallengeAnswer, ChallengesAreFresh) {
  StatusOr<Challenge> a = NewChallenge(), b = NewChallenge();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

class RendezvousTest : public ::testing::Test {
 protected:
  void StartServer(const std::string& key) {
    err_ = std::tmpfile();
    log_ = std::make_unique<EventLog>(LogFormat::kJson, stdout, err_);
    RendezvousServerOptions o;
    o.bind_host = "127.0.0.1";
    o.key = key;
    o.io_timeout = milliseconds(1000);
    o.log = log_.get();
    auto s = RendezvousServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(s).value();
  }
  void TearDown() override {
    server_.reset();
    if (err_) std::fclose(err_);
  }
  RendezvousClientOptions ClientOptions(const std::string& key, const std::string& task) {
    RendezvousClientOptions o;
    o.chief_address = "127.0.0.1:" + std::to_string(server_->port());
    o.chief_name = "worker 0";
    o.task_name = task;
    o.key = key;
    o.rendezvous_timeout = milliseconds(2000);
    o.io_timeout = milliseconds(1000);
    return o;
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  FILE* err_ = nullptr;
  std::unique_ptr<EventLog> log_;
  std::unique_ptr<RendezvousServer> server_;
};

TEST_F(RendezvousTest, SetGetWaitAcrossClientsAndTheChief) {
  StartServer("k");
  auto a = RendezvousClient::Connect(ClientOptions("k", "worker 1"));
  auto b = RendezvousClient::Connect(ClientOptions("k", "worker 2"));
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  // b waits for a key that a sets a little later.
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_TRUE((*a)->Set("x", std::string("v\0al", 4)).ok());
  });
  EXPECT_TRUE((*b)->Wait({"x"}, milliseconds(2000)).ok());
  setter.join();
  StatusOr<std::string> v = (*b)->Get("x");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, std::string("v\0al", 4));
  // The chief sees the same store in-process.
  EXPECT_EQ(*server_->local_store().Get("x"), std::string("v\0al", 4));
  EXPECT_TRUE(server_->local_store().Set("y", "from chief").ok());
  EXPECT_EQ(*(*a)->Get("y"), "from chief");
  EXPECT_EQ((*a)->Get("nope").status().message(), "rendezvous key \"nope\" is not set");
}

TEST_F(RendezvousTest, WaitTimesOutNamingTheMissingKeys) {
  StartServer("");
  auto a = RendezvousClient::Connect(ClientOptions("", "worker 1"));
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE((*a)->Set("here", "1").ok());
  const auto start = std::chrono::steady_clock::now();
  Status st = (*a)->Wait({"here", "missing"}, milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.message(),
            "timed out after 0.3 s waiting for rendezvous keys \"here\", \"missing\"");
  EXPECT_GE(took, milliseconds(290));
  EXPECT_LT(took, milliseconds(1500));
}

TEST_F(RendezvousTest, WrongKeyIsRefusedLoggedAndTheGoodConnectionStillWorks) {
  StartServer("right");
  auto good = RendezvousClient::Connect(ClientOptions("right", "worker 1"));
  ASSERT_TRUE(good.ok()) << good.status().message();
  const auto start = std::chrono::steady_clock::now();
  auto bad = RendezvousClient::Connect(ClientOptions("wrong", "worker 2"));
  ASSERT_FALSE(bad.ok());
  // Refused at once, not retried until the rendezvous timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
  EXPECT_EQ(bad.status().message(),
            "rendezvous with chief " + Address() + " (worker 0) refused: wrong TJ_RENDEZVOUS_KEY");
  EXPECT_EQ(bad.status().code(), StatusCode::kPermissionDenied);  // the trainer exits 1 on it
  auto keyless = RendezvousClient::Connect(ClientOptions("", "worker 3"));
  ASSERT_FALSE(keyless.ok());
  EXPECT_EQ(keyless.status().message(),
            "rendezvous with chief " + Address() +
                " (worker 0) refused: no TJ_RENDEZVOUS_KEY set here but the job requires one");
  EXPECT_EQ(keyless.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(server_->refused_count(), 2);
  // The good connection is undisturbed.
  EXPECT_TRUE((*good)->Set("k", "v").ok());
  EXPECT_EQ(*(*good)->Get("k"), "v");
  // The server logged both refusals (the log line is written once the server's thread ends the
  // connection; allow it a moment).
  std::string log;
  for (int i = 0; i < 100 && log.find("worker 3") == std::string::npos; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
    log = ReadAll(err_);
  }
  EXPECT_NE(log.find("warning: rendezvous server: connection from 127.0.0.1:"), std::string::npos)
      << log;
  EXPECT_NE(log.find("(\"worker 2\"): refused: wrong TJ_RENDEZVOUS_KEY; connection closed"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("(\"worker 3\"): refused: no TJ_RENDEZVOUS_KEY given but the job requires "
                     "one; connection closed"),
            std::string::npos)
      << log;
}

TEST_F(RendezvousTest, KeyHereButNoneAtTheChiefIsAnError) {
  StartServer("");
  auto c = RendezvousClient::Connect(ClientOptions("k", "worker 1"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "rendezvous with chief " + Address() +
                " (worker 0) refused: the chief does not require a rendezvous key but "
                "TJ_RENDEZVOUS_KEY is set here; give every task of the job the same key");
}

TEST(RendezvousClient, UnreachableChiefFailsAfterTheTimeoutNamingIt) {
  // Nothing listens on this port; a fake clock makes the 300 s pass at once.
  Socket probe = std::move(ListenTcp("127.0.0.1", 0)).value();
  const int port = LocalPort(probe);
  probe.Close();
  FakeClock clock;
  RendezvousClientOptions o;
  o.chief_address = "127.0.0.1:" + std::to_string(port);
  o.chief_name = "chief 0";
  o.task_name = "worker 0";
  o.clock = &clock;
  auto c = RendezvousClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "rendezvous with chief " + o.chief_address +
                " (chief 0) failed: could not reach it within 300 s (last error: connect: "
                "Connection refused); check that the chief is running and that TF_CONFIG names "
                "its host:port");
  EXPECT_GE(clock.Now() - FakeClock::TimePoint{}, std::chrono::seconds(300));
}

TEST(RendezvousClient, SilentServerTimesOutInsteadOfHanging) {
  // Accepts connections (the kernel does) but never speaks.
  Socket listener = std::move(ListenTcp("127.0.0.1", 0)).value();
  RendezvousClientOptions o;
  o.chief_address = "127.0.0.1:" + std::to_string(LocalPort(listener));
  o.chief_name = "worker 0";
  o.task_name = "worker 1";
  o.rendezvous_timeout = milliseconds(500);
  o.io_timeout = milliseconds(200);
  const auto start = std::chrono::steady_clock::now();
  auto c = RendezvousClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  EXPECT_NE(c.status().message().find("could not reach it within 0.5 s (last error: reading "
                                      "the chief's hello: timed out reading)"),
            std::string::npos)
      << c.status().message();
}

TEST(RendezvousServer, PortInUseIsAClearError) {
  Socket taken = std::move(ListenTcp("127.0.0.1", 0)).value();
  RendezvousServerOptions o;
  o.bind_host = "127.0.0.1";
  o.port = LocalPort(taken);
  auto s = RendezvousServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "rendezvous server: cannot listen on 127.0.0.1:" + std::to_string(o.port) +
                " (is another process using the chief's TF_CONFIG port?): bind: Address already "
                "in use");
}

}  // namespace
}  // namespace tj::cluster
