// The rendezvous store in one process: the proofs, set/get/wait through a real server and
// client on loopback, and the attacks: wrong and empty keys, an impostor chief, replayed,
// spliced and injected messages, a flood of idle and garbage connections; timeouts that bound
// every wait.
#include "trainer/cluster/rendezvous/rendezvous.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/sha256.h"
#include "tests/support/loopback_flood.h"
#include "tests/support/temp_dir.h"

namespace tj::cluster {
namespace {

using std::chrono::milliseconds;

using ::tj::testing::ReadAll;

HandshakeTranscript SomeTranscript() {
  HandshakeTranscript t;
  t.server_nonce[0] = 7;
  t.client_nonce[0] = 9;
  t.client_task = "worker 1";
  t.chief_task = "worker 0";
  return t;
}

TEST(Proofs, BindTheKeyBothNoncesAndBothRoles) {
  const HandshakeTranscript t = SomeTranscript();
  const Mac proof = *ClientProof("key", t);
  EXPECT_TRUE(MacEquals(*ClientProof("key", t), proof));
  EXPECT_FALSE(MacEquals(*ClientProof("kez", t), proof));
  // Each field of the transcript changes the proof.
  for (int field = 0; field < 5; ++field) {
    HandshakeTranscript other = t;
    if (field == 0) other.server_nonce[31] ^= 1;
    if (field == 1) other.client_nonce[31] ^= 1;
    if (field == 2) other.client_task = "worker 2";
    if (field == 3) other.chief_task = "chief 0";
    if (field == 4) other.gang = t.gang + 1;
    EXPECT_FALSE(MacEquals(*ClientProof("key", other), proof)) << "field " << field;
  }
  // The task names are length-prefixed: moving a character from one to the other changes it.
  HandshakeTranscript moved = t;
  moved.client_task = "worker 1w";
  moved.chief_task = "orker 0";
  EXPECT_FALSE(MacEquals(*ClientProof("key", moved), proof));
  // The three MACs differ: a client's proof cannot be reflected back as the chief's, and
  // neither reveals the session key.
  EXPECT_FALSE(MacEquals(*ServerProof("key", t), proof));
  EXPECT_FALSE(MacEquals(*SessionKey("key", t), proof));
  EXPECT_FALSE(MacEquals(*SessionKey("key", t), *ServerProof("key", t)));
  EXPECT_FALSE(MacEquals(*OtherGangProof("key", t), *ServerProof("key", t)));
  EXPECT_FALSE(MacEquals(*OtherGangProof("key", t), proof));
}

TEST(Proofs, NoncesAreFresh) {
  StatusOr<Nonce> a = NewNonce(), b = NewNonce();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

TEST(Proofs, AnHmacThatCannotBeComputedIsAnErrorNotADigest) {
  // A key longer than OpenSSL's int length: before, the length was cast to int and the HMAC
  // silently computed over a prefix of the key. The range is reserved, never touched.
  const size_t size = (size_t{1} << 31) + 5;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const std::string_view huge(static_cast<const char*>(p), size);
  StatusOr<Digest> d = HmacSha256(huge, "x", 1);
  EXPECT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("longer than OpenSSL takes"), std::string::npos);
  EXPECT_FALSE(ClientProof(huge, SomeTranscript()).ok());
  ::munmap(p, size);
}

class RendezvousTest : public ::testing::Test {
 protected:
  void StartServer(const std::string& key, int max_pending = 1024,
                   milliseconds handshake_timeout = milliseconds(1000), int max_sessions = 256,
                   int64_t gang = -1) {
    err_ = std::tmpfile();
    log_ = std::make_unique<EventLog>(LogFormat::kJson, stdout, err_);
    RendezvousServerOptions o;
    o.bind_host = "127.0.0.1";
    o.identity.job_key = key;
    o.chief_task = "worker 0";
    o.io_timeout = milliseconds(1000);
    o.handshake_timeout = handshake_timeout;
    o.max_pending = max_pending;
    o.max_sessions = max_sessions;
    o.identity.gang = gang;
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
    o.identity.job_key = key;
    o.rendezvous_timeout = milliseconds(2000);
    o.io_timeout = milliseconds(1000);
    return o;
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  // The server's log so far, once it contains `needle` (or after a second).
  std::string LogWith(const std::string& needle) {
    std::string log;
    for (int i = 0; i < 100; ++i) {
      log = ReadAll(err_);
      if (log.find(needle) != std::string::npos) break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return log;
  }

  FILE* err_ = nullptr;
  std::unique_ptr<EventLog> log_;
  std::unique_ptr<RendezvousServer> server_;
};

// ---- The wire format by hand, as an attacker (or a test) speaks it.

void PutU32(std::string& out, uint32_t n) {
  for (int sh = 24; sh >= 0; sh -= 8) out.push_back(static_cast<char>((n >> sh) & 0xff));
}

std::string Str(std::string_view s) {
  std::string out;
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
  return out;
}

// A frame: u32 length, body, HMAC(session key, direction || u64 sequence || body).
std::string SealByHand(const Mac& key, char direction, uint64_t sequence, std::string_view body) {
  std::string signed_part(1, direction);
  for (int sh = 56; sh >= 0; sh -= 8) {
    signed_part.push_back(static_cast<char>((sequence >> sh) & 0xff));
  }
  signed_part.append(body);
  const Digest tag =
      *HmacSha256(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()),
                  signed_part.data(), signed_part.size());
  std::string frame;
  PutU32(frame, static_cast<uint32_t>(body.size()));
  frame.append(body);
  frame.append(reinterpret_cast<const char*>(tag.data()), tag.size());
  return frame;
}

// Connects and authenticates as `task` with `key`; the session key.
Mac HandshakeByHand(Socket& s, const std::string& address_port, const std::string& key,
                    const std::string& task) {
  const int port = std::stoi(address_port);
  s = std::move(ConnectTcp("127.0.0.1", port, DeadlineIn(milliseconds(2000)))).value();
  const Deadline deadline = DeadlineIn(milliseconds(2000));
  unsigned char hello[37];
  EXPECT_TRUE(s.ReadExactly(hello, sizeof hello, deadline).ok());
  HandshakeTranscript t;
  std::copy(hello + 5, hello + 37, t.server_nonce.begin());
  t.client_nonce = *NewNonce();
  t.client_task = task;
  t.chief_task = "worker 0";
  std::string out("TJRV\x03", 5);
  out += Str(task);
  out.append(8, '\xff');  // gang -1: as the test server's
  out.append(reinterpret_cast<const char*>(t.client_nonce.data()), 32);
  const Mac proof = *ClientProof(key, t);
  out.append(reinterpret_cast<const char*>(proof.data()), 32);
  EXPECT_TRUE(s.WriteAll(out.data(), out.size(), deadline).ok());
  unsigned char verdict[33];
  EXPECT_TRUE(s.ReadExactly(verdict, sizeof verdict, deadline).ok());
  EXPECT_EQ(verdict[0], 0);
  return *SessionKey(key, t);
}

// True when the server closed the connection (EOF or reset) within a second, without a reply.
bool ClosedWithoutReply(Socket& s) {
  char c;
  Status st = s.ReadExactly(&c, 1, DeadlineIn(milliseconds(1000)));
  return !st.ok() && st.code() != StatusCode::kDeadlineExceeded;
}

// A fake chief that answers every connection with a well-formed hello and an "accepted"
// verdict carrying a proof it could not compute (it has no key). Counts its connections.
class ImpostorChief {
 public:
  explicit ImpostorChief(int port = 0)
      : listener_(std::move(ListenTcp("127.0.0.1", port)).value()),
        port_(LocalPort(listener_)),
        thread_([this] { Run(); }) {}
  ~ImpostorChief() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    listener_.Close();
  }
  int port() const { return port_; }
  int connections() const { return connections_.load(); }

 private:
  void Run() {
    while (!stop_) {
      StatusOr<Socket> c = AcceptTcp(listener_, DeadlineIn(milliseconds(20)));
      if (!c.ok() || !c->valid()) continue;
      connections_++;
      std::string out("TJRV\x03", 5);
      out.append(32, '\x11');  // its nonce
      out.push_back('\0');     // "accepted"
      out.append(32, '\x22');  // a proof it cannot compute without the key
      (void)c->WriteAll(out.data(), out.size(), DeadlineIn(milliseconds(500)));
      c->WaitReadable(DeadlineIn(milliseconds(100)));
    }
  }
  Socket listener_;
  int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// Options of a client (worker 1 with key "k") of a chief at 127.0.0.1:port.
RendezvousClientOptions ClientOf(int port) {
  RendezvousClientOptions o;
  o.chief_address = "127.0.0.1:" + std::to_string(port);
  o.chief_name = "worker 0";
  o.task_name = "worker 1";
  o.identity.job_key = "k";
  return o;
}

// Connect with `o` fails with "rendezvous with chief <address> (<chief name>) <then>" and
// `code`.
void ExpectConnectFails(const RendezvousClientOptions& o, const std::string& then,
                        StatusCode code) {
  auto c = RendezvousClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "rendezvous with chief " + o.chief_address + " (" + o.chief_name + ") " + then);
  EXPECT_EQ(c.status().code(), code);
}

int ThreadsOfThisProcess() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

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
  EXPECT_EQ(server_->session_count(), 2);
}

TEST_F(RendezvousTest, WaitTimesOutNamingTheMissingKeys) {
  StartServer("k");
  auto a = RendezvousClient::Connect(ClientOptions("k", "worker 1"));
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

TEST_F(RendezvousTest, WrongKeyIsRefusedRetriedLoggedAndTheGoodSessionStillWorks) {
  StartServer("right");
  auto good = RendezvousClient::Connect(ClientOptions("right", "worker 1"));
  ASSERT_TRUE(good.ok()) << good.status().message();
  RendezvousClientOptions wrong = ClientOptions("wrong", "worker 2");
  wrong.rendezvous_timeout = milliseconds(600);
  const auto start = std::chrono::steady_clock::now();
  auto bad = RendezvousClient::Connect(wrong);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(bad.ok());
  // Retried until the rendezvous deadline (a refusal may come from an impostor, or from a
  // chief of an older gang), then a retryable error: the trainer exits 75, not 1.
  EXPECT_GE(took, milliseconds(600));
  EXPECT_LT(took, milliseconds(3000));
  EXPECT_EQ(bad.status().message(),
            "rendezvous with chief " + Address() +
                " (worker 0) refused: wrong TJ_RENDEZVOUS_KEY (retried for 0.6 s); check that "
                "every task of the job has the same TJ_RENDEZVOUS_KEY");
  EXPECT_EQ(bad.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(server_->refused_count(), 2);
  // The good session is undisturbed.
  EXPECT_TRUE((*good)->Set("k", "v").ok());
  EXPECT_EQ(*(*good)->Get("k"), "v");
  const std::string log = LogWith("worker 2");
  EXPECT_NE(log.find("warning: rendezvous server: connection from 127.0.0.1:"), std::string::npos)
      << log;
  EXPECT_NE(log.find("(\"worker 2\"): refused: wrong TJ_RENDEZVOUS_KEY; connection closed"),
            std::string::npos)
      << log;
}

TEST_F(RendezvousTest, SessionsAreCappedAndAFreedSlotIsTakenByARetry) {
  StartServer("k", 1024, milliseconds(1000), /*max_sessions=*/1);
  auto first = RendezvousClient::Connect(ClientOptions("k", "worker 1"));
  ASSERT_TRUE(first.ok()) << first.status().message();
  RendezvousClientOptions o = ClientOptions("k", "worker 2");
  o.rendezvous_timeout = milliseconds(400);
  auto second = RendezvousClient::Connect(o);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("refused: the chief has 1 sessions open already"),
            std::string::npos)
      << second.status().message();
  // The first session ends; the next try gets the slot.
  first->reset();
  o.rendezvous_timeout = milliseconds(3000);
  auto third = RendezvousClient::Connect(o);
  ASSERT_TRUE(third.ok()) << third.status().message();
  EXPECT_TRUE((*third)->Set("a", "b").ok());
  EXPECT_EQ(server_->session_count(), 1);
}

TEST_F(RendezvousTest, AnEmptyKeyIsRefusedWithAClearMessage) {
  RendezvousServerOptions so;
  so.bind_host = "127.0.0.1";
  auto server = RendezvousServer::Start(so);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(server.status().message().find("rendezvous server: TJ_RENDEZVOUS_KEY is empty"),
            std::string::npos)
      << server.status().message();

  StartServer("k");
  const auto start = std::chrono::steady_clock::now();
  auto keyless = RendezvousClient::Connect(ClientOptions("", "worker 3"));
  ASSERT_FALSE(keyless.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(500));  // at once
  EXPECT_EQ(keyless.status().code(), StatusCode::kPermissionDenied);       // the trainer exits 1
  EXPECT_NE(keyless.status().message().find("TJ_RENDEZVOUS_KEY is empty"), std::string::npos);

  RendezvousOptions ro;
  ro.chief_address = Address();
  ro.chief_name = "worker 0";
  ro.task_name = "worker 1";
  ro.collective_size = 3;
  auto joined = Rendezvous::Join(ro);
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(joined.status().message(),
            "TJ_RENDEZVOUS_KEY is empty, but this collective has 3 members: each must prove it "
            "holds the job's key to join (the operator sets it from the Secret "
            "<job>-rendezvous-<uid>; when starting tasks by hand, give every task the same "
            "TJ_RENDEZVOUS_KEY)");
  EXPECT_EQ(server_->session_count(), 0);
}

TEST(RendezvousClient, AnImpostorChiefWithoutTheKeyIsDetected) {
  ImpostorChief impostor;
  RendezvousClientOptions o = ClientOf(impostor.port());
  o.identity.job_key = "the-job-key";
  o.rendezvous_timeout = milliseconds(800);
  o.io_timeout = milliseconds(500);
  ExpectConnectFails(o,
                     "refused: the chief did not prove it holds TJ_RENDEZVOUS_KEY (an impostor at "
                     "its address, or a chief with another key) (retried for 0.8 s); check that "
                     "every task of the job has the same TJ_RENDEZVOUS_KEY",
                     StatusCode::kDeadlineExceeded);
  EXPECT_GE(impostor.connections(), 2);  // retried, not a permanent failure
}

TEST(RendezvousClient, ARefusalIsRetriedUntilTheRealChiefAnswers) {
  auto impostor = std::make_unique<ImpostorChief>();
  const int port = impostor->port();
  RendezvousClientOptions o = ClientOf(port);
  o.identity.job_key = "the-job-key";
  o.rendezvous_timeout = milliseconds(10000);
  o.io_timeout = milliseconds(500);
  std::unique_ptr<RendezvousServer> real;
  std::thread swap([&] {
    while (impostor->connections() < 2) std::this_thread::sleep_for(milliseconds(5));
    impostor->Stop();
    RendezvousServerOptions so;
    so.bind_host = "127.0.0.1";
    so.port = port;
    so.identity.job_key = "the-job-key";
    so.chief_task = "worker 0";
    auto s = RendezvousServer::Start(so);
    ASSERT_TRUE(s.ok()) << s.status().message();
    real = std::move(s).value();
  });
  auto c = RendezvousClient::Connect(o);
  swap.join();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE((*c)->Set("a", "b").ok());
  EXPECT_EQ(*real->local_store().Get("a"), "b");
}

TEST_F(RendezvousTest, ReplayedSplicedAndInjectedMessagesEndTheSessionUnheard) {
  StartServer("k");
  const std::string port = std::to_string(server_->port());
  Socket a, b, c;
  const Mac key_a = HandshakeByHand(a, port, "k", "worker 1");
  const Mac key_b = HandshakeByHand(b, port, "k", "worker 2");
  const Mac key_c = HandshakeByHand(c, port, "k", "worker 3");
  EXPECT_FALSE(MacEquals(key_a, key_b));  // every session has its own key
  EXPECT_FALSE(MacEquals(key_b, key_c));
  auto set = [](const std::string& k, const std::string& v) {
    return std::string(1, '\x01') + Str(k) + Str(v);
  };
  // A proper request on a: answered.
  const std::string frame = SealByHand(key_a, 'C', 0, set("a", "1"));
  ASSERT_TRUE(a.WriteAll(frame.data(), frame.size(), DeadlineIn(milliseconds(1000))).ok());
  char reply[4 + 1 + 32];
  ASSERT_TRUE(a.ReadExactly(reply, sizeof reply, DeadlineIn(milliseconds(1000))).ok());
  // The same frame again (a replay): the sequence number no longer matches.
  ASSERT_TRUE(a.WriteAll(frame.data(), frame.size(), DeadlineIn(milliseconds(1000))).ok());
  EXPECT_TRUE(ClosedWithoutReply(a));
  // a's frame spliced into b's session: b's key does not match.
  const std::string spliced = SealByHand(key_a, 'C', 0, set("spliced", "1"));
  ASSERT_TRUE(b.WriteAll(spliced.data(), spliced.size(), DeadlineIn(milliseconds(1000))).ok());
  EXPECT_TRUE(ClosedWithoutReply(b));
  // A request injected into c's session without the session key (a TCP hijack).
  std::string injected = set("injected", "1");
  std::string raw;
  PutU32(raw, static_cast<uint32_t>(injected.size()));
  raw += injected + std::string(32, '\0');
  ASSERT_TRUE(c.WriteAll(raw.data(), raw.size(), DeadlineIn(milliseconds(1000))).ok());
  EXPECT_TRUE(ClosedWithoutReply(c));
  // Only the proper request took effect.
  EXPECT_EQ(*server_->local_store().Get("a"), "1");
  EXPECT_FALSE(server_->local_store().Get("spliced").ok());
  EXPECT_FALSE(server_->local_store().Get("injected").ok());
  const std::string log = LogWith("worker 3");
  EXPECT_NE(log.find("(\"worker 3\"): message not authenticated by the session's key"),
            std::string::npos)
      << log;
}

TEST_F(RendezvousTest, ATaskOfAnOlderGangIsRefusedAtOnceAndANewerOneWaitsForItsChief) {
  StartServer("k", 1024, milliseconds(1000), 256, /*gang=*/5);
  // Gang 4's task: the operator replaced its gang. Told so at once, with the chief's proof.
  RendezvousClientOptions old = ClientOptions("k", "worker 1");
  old.identity.gang = 4;
  old.rendezvous_timeout = milliseconds(10000);
  const auto start = std::chrono::steady_clock::now();
  auto refused = RendezvousClient::Connect(old);
  ASSERT_FALSE(refused.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find(
                "refused: this task is of gang 4 (TJ_RESTART_COUNT), the chief serves gang 5: "
                "this task belongs to a gang that was replaced"),
            std::string::npos)
      << refused.status().message();
  // Gang 6's task reached a chief of gang 5 still running: it waits for its own, until the
  // timeout.
  RendezvousClientOptions newer = ClientOptions("k", "worker 1");
  newer.identity.gang = 6;
  newer.rendezvous_timeout = milliseconds(800);
  auto waited = RendezvousClient::Connect(newer);
  ASSERT_FALSE(waited.ok());
  EXPECT_EQ(waited.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(waited.status().message().find("the chief at that address serves older gang 5"),
            std::string::npos)
      << waited.status().message();
  // Without the key, the gang it claims does not matter: a wrong key.
  RendezvousClientOptions stranger = ClientOptions("other", "worker 1");
  stranger.identity.gang = 4;
  stranger.rendezvous_timeout = milliseconds(300);
  auto wrong = RendezvousClient::Connect(stranger);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find(kWrongKeyReason), std::string::npos)
      << wrong.status().message();
  // The chief's own gang joins.
  RendezvousClientOptions same = ClientOptions("k", "worker 1");
  same.identity.gang = 5;
  auto good = RendezvousClient::Connect(same);
  ASSERT_TRUE(good.ok()) << good.status().message();
  EXPECT_TRUE((*good)->Set("a", "b").ok());
  EXPECT_NE(LogWith("this chief serves gang 5")
                .find("refused: it is of gang 4, this chief "
                      "serves gang 5"),
            std::string::npos);
}

TEST(RendezvousClient, AReplyNotAuthenticatedBySessionKeyEndsTheSession) {
  // A chief that authenticates properly, then answers with a reply not sealed by the session
  // key: what the worker sees when someone takes over the connection after the handshake.
  Socket listener = std::move(ListenTcp("127.0.0.1", 0)).value();
  std::thread chief([&] {
    StatusOr<Socket> c = AcceptTcp(listener, DeadlineIn(milliseconds(2000)));
    ASSERT_TRUE(c.ok() && c->valid());
    const Deadline deadline = DeadlineIn(milliseconds(2000));
    HandshakeTranscript t;
    t.server_nonce = *NewNonce();
    std::string hello("TJRV\x03", 5);
    hello.append(reinterpret_cast<const char*>(t.server_nonce.data()), 32);
    ASSERT_TRUE(c->WriteAll(hello.data(), hello.size(), deadline).ok());
    unsigned char head[9];
    ASSERT_TRUE(c->ReadExactly(head, 9, deadline).ok());
    t.client_task.resize(head[8]);
    ASSERT_TRUE(c->ReadExactly(t.client_task.data(), t.client_task.size(), deadline).ok());
    unsigned char rest[8 + 64];
    ASSERT_TRUE(c->ReadExactly(rest, sizeof rest, deadline).ok());
    std::copy(rest + 8, rest + 40, t.client_nonce.begin());
    t.chief_task = "worker 0";
    const Mac proof = *ServerProof("k", t);
    std::string verdict(1, '\0');
    verdict.append(reinterpret_cast<const char*>(proof.data()), 32);
    ASSERT_TRUE(c->WriteAll(verdict.data(), verdict.size(), deadline).ok());
    // Read the Get request, answer with "found: evil" under a wrong tag.
    char request[4 + 1 + 4 + 1 + 32];  // a Get of "x"

    ASSERT_TRUE(c->ReadExactly(request, sizeof request, deadline).ok());
    std::string forged = SealByHand(Mac{}, 'S', 0, std::string(1, '\x01') + Str("evil"));
    ASSERT_TRUE(c->WriteAll(forged.data(), forged.size(), deadline).ok());
    c->WaitReadable(deadline);
  });
  RendezvousClientOptions o = ClientOf(LocalPort(listener));
  o.rendezvous_timeout = milliseconds(3000);
  auto client = RendezvousClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status().message();
  StatusOr<std::string> v = (*client)->Get("x");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("message not authenticated by the session's key"),
            std::string::npos)
      << v.status().message();
  // The session is closed: later calls fail fast instead of reading out of step.
  EXPECT_NE((*client)->Get("x").status().message().find("connection lost earlier"),
            std::string::npos);
  client->reset();
  chief.join();
}

TEST_F(RendezvousTest, AFloodOfIdleAndGarbageConnectionsIsBoundedAndARealPeerGetsThrough) {
  // Enough descriptors for the flood in this process (the server's side is capped).
  rlimit nofile{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &nofile), 0);
  nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 8192);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &nofile), 0);
  const int flood = static_cast<int>(std::min<rlim_t>(3000, (nofile.rlim_cur - 200) / 2));
  ASSERT_GE(flood, 400) << "RLIMIT_NOFILE too low for the test: " << nofile.rlim_max;
  constexpr int kMaxPending = 64;
  StartServer("k", kMaxPending, milliseconds(2000));
  const int threads_before = ThreadsOfThisProcess();
  std::vector<Socket> attackers;
  int max_threads = 0, max_pending = 0;
  for (int i = 0; i < flood; ++i) {
    StatusOr<Socket> s = ConnectTcp("127.0.0.1", server_->port(), DeadlineIn(milliseconds(2000)));
    ASSERT_TRUE(s.ok()) << i << ": " << s.status().message();
    if (i % 3 == 1) {  // garbage
      const std::string junk = "GET / HTTP/1.1\r\n\r\n" + std::to_string(i);
      (void)s->WriteAll(junk.data(), junk.size(), DeadlineIn(milliseconds(100)));
    } else if (i % 3 == 2) {  // a hello that stops half-way (slowloris)
      const std::string partial = std::string("TJRV\x03", 5) + Str("worker 9").substr(0, 6);
      (void)s->WriteAll(partial.data(), partial.size(), DeadlineIn(milliseconds(100)));
    }
    attackers.push_back(std::move(s).value());
    if (i % 100 == 0) {
      max_threads = std::max(max_threads, ThreadsOfThisProcess());
      max_pending = std::max(max_pending, server_->pending_count());
    }
  }
  // A real peer gets its session while every attacker is still connected.
  auto good = RendezvousClient::Connect(ClientOptions("k", "worker 1"));
  ASSERT_TRUE(good.ok()) << good.status().message();
  EXPECT_TRUE((*good)->Set("after", "flood").ok());
  EXPECT_EQ(*(*good)->Get("after"), "flood");
  max_threads = std::max(max_threads, ThreadsOfThisProcess());
  max_pending = std::max(max_pending, server_->pending_count());
  // One loop thread for every handshake, one per session: no thread per connection (before,
  // every connection had a thread of its own, thousands here).
  EXPECT_LE(max_threads, threads_before + 2) << "threads before the flood: " << threads_before;
  EXPECT_LE(max_pending, kMaxPending);
  EXPECT_GE(server_->dropped_count(), flood - kMaxPending);
  // The log says so without a line per connection.
  const std::string log = LogWith("not logged one by one");
  EXPECT_LT(std::count(log.begin(), log.end(), '\n'), 40) << log.substr(0, 2000);
}

// Strangers from 8 addresses send the first byte of a valid hello and hold on, as fast as they
// can, so that every accept at the bound (64 here) must close someone. Each of 20 real peers,
// from an address of their own, tries once (no retry within the client). Before, the chief
// closed the oldest connection that had sent nothing yet: the real peer's, whose hello was on
// its way.
TEST_F(RendezvousTest, AFloodOfPartialHellosFromManyAddressesCannotPushOutThePeers) {
  constexpr int kPeers = 20;
  StartServer("k", /*max_pending=*/64, milliseconds(5000));
  tj::testing::LoopbackFlood flood(server_->port(), 2, 8, "T", 200);
  while (flood.connections() < 500) std::this_thread::sleep_for(milliseconds(10));
  int joined = 0;
  std::string failures;
  for (int i = 0; i < kPeers; ++i) {
    RendezvousClientOptions o = ClientOptions("k", "worker 1");
    o.rendezvous_timeout = milliseconds(0);  // one try
    o.io_timeout = milliseconds(5000);
    auto peer = RendezvousClient::Connect(o);
    if (peer.ok()) {
      ++joined;
    } else {
      failures += peer.status().message() + "\n";
    }
  }
  std::cout << "flood: " << flood.connections() << " connections, " << joined << " of " << kPeers
            << " peers joined\n";
  EXPECT_EQ(joined, kPeers) << failures;
}

TEST(RendezvousClient, UnreachableChiefFailsAfterTheTimeoutNamingIt) {
  // Nothing listens on this port; a fake clock makes the 300 s pass at once.
  Socket probe = std::move(ListenTcp("127.0.0.1", 0)).value();
  const int port = LocalPort(probe);
  probe.Close();
  FakeClock clock;
  RendezvousClientOptions o = ClientOf(port);
  o.clock = &clock;
  ExpectConnectFails(o,
                     "failed: could not reach it within 300 s (last error: connect: Connection "
                     "refused); check that the chief is running and that TF_CONFIG names its "
                     "host:port",
                     StatusCode::kDeadlineExceeded);
  EXPECT_GE(clock.Now() - FakeClock::TimePoint{}, std::chrono::seconds(300));
}

TEST(RendezvousClient, SilentServerTimesOutInsteadOfHanging) {
  // Accepts connections (the kernel does) but never speaks.
  Socket listener = std::move(ListenTcp("127.0.0.1", 0)).value();
  RendezvousClientOptions o = ClientOf(LocalPort(listener));
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
  o.identity.job_key = "k";
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
