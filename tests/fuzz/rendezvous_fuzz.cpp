// Fuzz target: the rendezvous server's wire protocol
// (trainer/cluster/rendezvous/rendezvous_server.h), fed as a client would feed it: each input goes
// over a fresh loopback TCP connection to a real RendezvousServer, the harness half-closes the
// connection and drains the replies. There is no parsing function to call directly: the server
// decodes straight from the socket. The first input byte picks a mode:
//   0: the rest is everything the client sends, hello included, before authenticating (the
//      handshake parser, the refusal path);
//   1: the harness authenticates properly with the key, then reads the rest as request
//      bodies, each prefixed by a u16 length (the last one takes what is left), seals each
//      with the session key as RendezvousClient does and sends them, so the request decoder
//      is reached behind authentication too.
// A crash or sanitizer report in any server thread fails the run. A request that blocks
// (a Wait for keys nobody sets) is ended by restarting the server, which bounds every input.
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "common/event_log.h"
#include "common/sha256.h"
#include "tests/fuzz/fuzz_check.h"
#include "trainer/cluster/net/socket.h"
#include "trainer/cluster/rendezvous/rendezvous_server.h"

namespace {

using std::chrono::milliseconds;
using tj::cluster::DeadlineIn;
using tj::cluster::HandshakeTranscript;
using tj::cluster::Mac;
using tj::cluster::RendezvousServer;
using tj::cluster::RendezvousServerOptions;
using tj::cluster::Socket;

constexpr char kKey[] = "fuzz-rendezvous-key";
constexpr char kTaskName[] = "worker 1";
constexpr char kChiefTask[] = "worker 0";
// Restart the server now and then, so that the keys fuzz inputs Set do not pile up.
constexpr int kInputsPerServer = 5000;

// Owns the server and restarts it on demand.
class Servers {
 public:
  Servers()
      : devnull_(std::fopen("/dev/null", "w")), log_(tj::LogFormat::kText, devnull_, devnull_) {
    TJ_FUZZ_CHECK(devnull_ != nullptr);
  }
  RendezvousServer& Get() {
    if (server_ == nullptr || ++uses_ > kInputsPerServer) {
      server_.reset();
      RendezvousServerOptions o;
      o.bind_host = "127.0.0.1";
      o.port = 0;
      o.identity.job_key = kKey;
      o.chief_task = kChiefTask;
      o.io_timeout = milliseconds(200);
      // Long enough for the harness's own authentication on a loaded machine (every input
      // half-closes its connection, so no input waits for this limit).
      o.handshake_timeout = milliseconds(2000);
      o.log = &log_;
      auto started = RendezvousServer::Start(o);
      TJ_FUZZ_CHECK(started.ok());
      server_ = std::move(started).value();
      uses_ = 1;
    }
    return *server_;
  }
  void Restart() { server_.reset(); }

 private:
  FILE* devnull_;
  tj::EventLog log_;
  std::unique_ptr<RendezvousServer> server_;
  int uses_ = 0;
};

Servers& TheServers() {
  // Lives for the whole process (threads use it). At exit the server is stopped first, so
  // that its threads end and OpenSSL frees what it keeps per thread (the error queue, 904
  // bytes) before LeakSanitizer looks. OpenSSL is initialised before that handler is
  // registered: handlers run in reverse order, and after OPENSSL_cleanup a thread that ends
  // no longer frees its state.
  static Servers* servers = [] {
    OPENSSL_init_crypto(OPENSSL_INIT_ADD_ALL_DIGESTS, nullptr);  // 0 would do nothing
    auto* s = new Servers();
    std::atexit([] { TheServers().Restart(); });
    return s;
  }();
  return *servers;
}

void PutU32(std::string& out, uint32_t n) {
  for (int sh = 24; sh >= 0; sh -= 8) out.push_back(static_cast<char>((n >> sh) & 0xff));
}

// Authenticates as kTaskName with kKey, as RendezvousClient does; the session key, or nullopt
// if the exchange did not complete in time (a machine too loaded to schedule the server's
// thread: not the server's fault, the input is skipped). A refusal of the right key, or a
// server that cannot prove it holds it, is a bug and stops the run.
std::optional<Mac> Authenticate(Socket& s) {
  const auto deadline = DeadlineIn(milliseconds(2000));
  unsigned char hello[4 + 1 + 32];
  if (!s.ReadExactly(hello, sizeof hello, deadline).ok()) return std::nullopt;
  HandshakeTranscript t;
  std::copy(hello + 5, hello + 37, t.server_nonce.begin());
  t.client_nonce.fill(7);
  t.client_task = kTaskName;
  t.chief_task = kChiefTask;
  const auto proof = tj::cluster::ClientProof(kKey, t);
  const auto server_proof = tj::cluster::ServerProof(kKey, t);
  const auto session_key = tj::cluster::SessionKey(kKey, t);
  TJ_FUZZ_CHECK(proof.ok() && server_proof.ok() && session_key.ok());
  std::string reply("TJRV\x03", 5);
  PutU32(reply, sizeof(kTaskName) - 1);
  reply += kTaskName;
  reply.append(8, '\xff');  // gang -1, the server's
  reply.append(reinterpret_cast<const char*>(t.client_nonce.data()), t.client_nonce.size());
  reply.append(reinterpret_cast<const char*>(proof->data()), proof->size());
  if (!s.WriteAll(reply.data(), reply.size(), deadline).ok()) return std::nullopt;
  unsigned char verdict[1 + 32];
  if (!s.ReadExactly(verdict, sizeof verdict, deadline).ok()) return std::nullopt;
  TJ_FUZZ_CHECK(verdict[0] == 0);  // the right key, refused
  Mac got{};
  std::copy(verdict + 1, verdict + 33, got.begin());
  TJ_FUZZ_CHECK(tj::cluster::MacEquals(got, *server_proof));
  return *session_key;
}

// A request frame as RendezvousClient seals it: u32 length, body,
// HMAC(session key, 'C' || u64 sequence || body).
std::string Seal(const Mac& key, uint64_t sequence, std::string_view body) {
  std::string signed_part(1, 'C');
  for (int sh = 56; sh >= 0; sh -= 8)
    signed_part.push_back(static_cast<char>((sequence >> sh) & 0xff));
  signed_part.append(body);
  const auto tag =
      tj::HmacSha256(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()),
                     signed_part.data(), signed_part.size());
  TJ_FUZZ_CHECK(tag.ok());
  std::string frame;
  PutU32(frame, static_cast<uint32_t>(body.size()));
  frame.append(body);
  frame.append(reinterpret_cast<const char*>(tag->data()), tag->size());
  return frame;
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
  const bool authenticated = data[0] % 2 == 1;
  Servers& servers = TheServers();
  RendezvousServer& server = servers.Get();
  auto connected =
      tj::cluster::ConnectTcp("127.0.0.1", server.port(), DeadlineIn(milliseconds(10000)));
  TJ_FUZZ_CHECK(connected.ok());
  Socket socket = std::move(connected).value();
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  if (authenticated) {
    const std::optional<Mac> key = Authenticate(socket);
    if (!key.has_value()) return 0;
    std::string frames;
    uint64_t sequence = 0;
    std::string_view rest(bytes);
    while (!rest.empty()) {
      size_t n = rest.size();
      if (rest.size() >= 2) {
        n = std::min(rest.size() - 2, size_t{static_cast<unsigned char>(rest[0])} << 8 |
                                          static_cast<unsigned char>(rest[1]));
        rest.remove_prefix(2);
      }
      frames += Seal(*key, sequence++, rest.substr(0, n));
      rest.remove_prefix(n);
    }
    bytes = frames;
  }
  // The server may close early (bad magic, a refused proof): a failed write is not an error.
  (void)socket.WriteAll(bytes.data(), bytes.size(), DeadlineIn(milliseconds(2000)));
  ::shutdown(socket.fd(), SHUT_WR);
  if (!DrainUntilClosed(socket, milliseconds(300))) {
    // A request blocks (a Wait for keys nobody sets): restarting the server ends it.
    socket.Close();
    servers.Restart();
  }
  return 0;
}
