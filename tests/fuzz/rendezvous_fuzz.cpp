// Fuzz target: the rendezvous server's wire protocol (trainer/cluster/rendezvous.h), fed as
// a client would feed it: each input goes over a fresh loopback TCP connection to a real
// RendezvousServer, the harness half-closes the connection and drains the replies. There
// is no parsing function to call directly: the server decodes straight from the socket.
// The first input byte picks a mode:
//   0: the rest is everything the client sends, hello included, to a server without a key;
//   1: the same, to a server that requires a key (the handshake and the refusal path);
//   2: the harness authenticates properly with the key, then sends the rest as requests
//      (Set/Get/Wait), so the request decoder is reached behind authentication too.
// A crash or sanitizer report in any server thread fails the run. A request that blocks
// (a Wait for keys nobody sets) is ended by restarting the server, which bounds every input.
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/event_log.h"
#include "tests/fuzz/fuzz_check.h"
#include "trainer/cluster/rendezvous.h"
#include "trainer/cluster/socket.h"

namespace {

using std::chrono::milliseconds;
using tj::cluster::Challenge;
using tj::cluster::DeadlineIn;
using tj::cluster::RendezvousServer;
using tj::cluster::RendezvousServerOptions;
using tj::cluster::Socket;

constexpr char kKey[] = "fuzz-rendezvous-key";
constexpr char kTaskName[] = "worker 1";
// Restart the servers now and then, so that the keys fuzz inputs Set do not pile up.
constexpr int kInputsPerServer = 5000;

// Owns the two servers (without and with a key) and restarts one on demand.
class Servers {
 public:
  Servers()
      : devnull_(std::fopen("/dev/null", "w")), log_(tj::LogFormat::kText, devnull_, devnull_) {
    TJ_FUZZ_CHECK(devnull_ != nullptr);
  }
  RendezvousServer& Get(bool keyed) {
    std::unique_ptr<RendezvousServer>& s = keyed ? keyed_ : open_;
    int& uses = keyed ? keyed_uses_ : open_uses_;
    if (s == nullptr || ++uses > kInputsPerServer) {
      s.reset();
      RendezvousServerOptions o;
      o.bind_host = "127.0.0.1";
      o.port = 0;
      o.key = keyed ? kKey : "";
      o.io_timeout = milliseconds(200);
      o.log = &log_;
      auto started = RendezvousServer::Start(o);
      TJ_FUZZ_CHECK(started.ok());
      s = std::move(started).value();
      uses = 1;
    }
    return *s;
  }
  void Restart(bool keyed) { (keyed ? keyed_ : open_).reset(); }

 private:
  FILE* devnull_;
  tj::EventLog log_;
  std::unique_ptr<RendezvousServer> open_, keyed_;
  int open_uses_ = 0, keyed_uses_ = 0;
};

Servers& TheServers() {
  static Servers* servers = new Servers();  // lives for the whole process (threads use it)
  return *servers;
}

// Authenticates as kTaskName with kKey, as RendezvousClient does. False if the server did not
// accept (it must, with the right key).
bool Authenticate(Socket& s) {
  const auto deadline = DeadlineIn(milliseconds(2000));
  unsigned char hello[4 + 1 + 1 + 32];
  if (!s.ReadExactly(hello, sizeof hello, deadline).ok()) return false;
  Challenge challenge;
  std::copy(hello + 6, hello + 38, challenge.begin());
  const auto answer = tj::cluster::AnswerChallenge(kKey, challenge, kTaskName);
  std::string reply("TJRV");
  const uint32_t n = sizeof(kTaskName) - 1;
  for (int sh = 24; sh >= 0; sh -= 8) reply.push_back(static_cast<char>((n >> sh) & 0xff));
  reply += kTaskName;
  reply.push_back(1);
  reply.append(reinterpret_cast<const char*>(answer.data()), answer.size());
  if (!s.WriteAll(reply.data(), reply.size(), deadline).ok()) return false;
  unsigned char verdict[5];  // u8 verdict, u32 length 0 of the empty reason
  if (!s.ReadExactly(verdict, sizeof verdict, deadline).ok()) return false;
  return verdict[0] == 0;
}

// Reads until the server closes the connection. False if it is still open at the deadline.
bool DrainUntilClosed(Socket& s, milliseconds limit) {
  const auto deadline = DeadlineIn(limit);
  char buf[4096];
  while (true) {
    const ssize_t n = ::recv(s.fd(), buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n > 0) continue;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return true;  // reset: closed as well
    if (!s.WaitReadable(deadline)) return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 3;
  const bool keyed = mode != 0;
  Servers& servers = TheServers();
  RendezvousServer& server = servers.Get(keyed);
  auto connected =
      tj::cluster::ConnectTcp("127.0.0.1", server.port(), DeadlineIn(milliseconds(2000)));
  TJ_FUZZ_CHECK(connected.ok());
  Socket socket = std::move(connected).value();
  if (mode == 2) TJ_FUZZ_CHECK(Authenticate(socket));
  // The server may close early (bad magic, a refused key): a failed write is not an error.
  (void)socket.WriteAll(data + 1, size - 1, DeadlineIn(milliseconds(2000)));
  ::shutdown(socket.fd(), SHUT_WR);
  if (!DrainUntilClosed(socket, milliseconds(300))) {
    // A request blocks (a Wait for keys nobody sets): restarting the server ends it.
    socket.Close();
    servers.Restart(keyed);
  }
  return 0;
}
