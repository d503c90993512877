#include "trainer/cluster/net/handshake_acceptor.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/duration_text.h"

namespace tj::cluster {

namespace {

// The address without the port, as PeerName gives both: "10.0.0.7:41234" -> "10.0.0.7",
// "[fd00::5]:41234" -> "[fd00::5]".
std::string SourceOf(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

}  // namespace

bool SendNow(const Socket& socket, std::string_view bytes) {
  const ssize_t n = ::send(socket.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  return n == static_cast<ssize_t>(bytes.size());
}

HandshakeAcceptor::HandshakeAcceptor(Socket* listener, HandshakeAcceptorOptions options,
                                     HandshakeProtocol protocol)
    : listener_(listener), options_(std::move(options)), protocol_(std::move(protocol)) {
  options_.max_pending = std::max(options_.max_pending, 1);
  options_.accept_batch = std::max(options_.accept_batch, 1);
}

void HandshakeAcceptor::Warn(const std::string& line) {
  if (options_.log == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - warn_window_start_ >= std::chrono::minutes(1)) {
    if (suppressed_in_window_ > 0) {
      options_.log->Warn(options_.log_prefix + ": " + std::to_string(suppressed_in_window_) +
                         " more connections closed unauthenticated in the last minute (not "
                         "logged one by one)");
    }
    warn_window_start_ = now;
    warned_in_window_ = 0;
    suppressed_in_window_ = 0;
  }
  if (warned_in_window_ >= options_.warnings_per_minute) {
    ++suppressed_in_window_;
    return;
  }
  ++warned_in_window_;
  options_.log->Warn(options_.log_prefix + ": " + line +
                     (warned_in_window_ == options_.warnings_per_minute
                          ? " (more are not logged this minute)"
                          : ""));
}

void HandshakeAcceptor::Closed(const PendingHandshake& p, const HandshakeStep& step) {
  const bool refused = step.kind == HandshakeStep::Kind::kRefused;
  (refused ? refused_ : dropped_).fetch_add(1);
  const std::string who = p.peer + (step.claimed.empty() ? "" : " " + step.claimed);
  last_closed_ = who + ": " + (refused ? "refused: " : "") + step.reason;
  Warn("connection from " + last_closed_ + "; connection closed");
}

void HandshakeAcceptor::ExpireDue() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    Closed(*it, HandshakeStep::Dropped("sent no complete hello within the handshake timeout (" +
                                       FormatSeconds(options_.handshake_timeout) + ")"));
    it = pending_.erase(it);
  }
}

HandshakeStep HandshakeAcceptor::Advance(PendingHandshake& p) {
  // At most one byte more than the longest hello: a connection that sends more than a hello
  // before its answer is closed.
  char buf[4096];
  const size_t room = protocol_.max_hello_bytes + 1 - p.received.size();
  const ssize_t n = ::recv(p.socket.fd(), buf, std::min(room, sizeof buf), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    return HandshakeStep::Waiting();
  }
  if (n == 0) return HandshakeStep::Dropped("closed before completing its handshake");
  if (n < 0) return HandshakeStep::Dropped(std::string("read: ") + std::strerror(errno));
  p.received.append(buf, static_cast<size_t>(n));
  HandshakeStep step = protocol_.judge(p);
  if (step.kind == HandshakeStep::Kind::kWaiting && p.received.size() > protocol_.max_hello_bytes) {
    return HandshakeStep::Dropped("sent more than a hello before the answer");
  }
  return step;
}

Status HandshakeAcceptor::ServeOnce(Deadline until, const std::atomic<bool>* stop) {
  ExpireDue();
  const auto now = std::chrono::steady_clock::now();
  std::vector<pollfd> fds;
  std::vector<std::list<PendingHandshake>::iterator> polled;
  fds.push_back(pollfd{listener_->fd(), POLLIN, 0});
  Deadline wake = std::min(until, now + std::chrono::milliseconds(100));
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    fds.push_back(pollfd{it->socket.fd(), POLLIN, 0});
    polled.push_back(it);
    wake = std::min(wake, it->deadline);
  }
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;
  const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait, 0)));
  if (rc < 0) {
    if (errno == EINTR) return Status::Ok();
    return Status::Error(std::string("poll: ") + std::strerror(errno));
  }
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    PendingHandshake& p = *polled[i - 1];
    const HandshakeStep step = Advance(p);
    using Kind = HandshakeStep::Kind;
    if (step.kind == Kind::kWaiting) continue;
    if (step.kind == Kind::kRefused || step.kind == Kind::kDropped) Closed(p, step);
    pending_.erase(polled[i - 1]);
    if (step.kind == Kind::kDoneReturn) return Status::Ok();
  }
  if (fds[0].revents != 0) AcceptBatch(stop);
  return Status::Ok();
}

void HandshakeAcceptor::PushOutOne() {
  // The oldest of the address that holds the most goes: a real peer holds one or two from its
  // own address, so strangers push out each other first; with as many addresses as slots (one
  // each) the oldest goes, and a real peer, which answers within a round trip, is not it.
  // Whether a connection has sent anything yet says nothing: a stranger can send a byte.
  std::unordered_map<std::string_view, int> held;
  int most = 0;
  for (const PendingHandshake& p : pending_) most = std::max(most, ++held[p.source]);
  auto victim = std::find_if(pending_.begin(), pending_.end(),
                             [&](const PendingHandshake& p) { return held[p.source] == most; });
  Closed(*victim,
         HandshakeStep::Dropped("closed unauthenticated: " + std::to_string(options_.max_pending) +
                                " handshakes were waiting (a flood?)"));
  pending_.erase(victim);
}

void HandshakeAcceptor::AcceptBatch(const std::atomic<bool>* stop) {
  for (int i = 0; i < options_.accept_batch && (stop == nullptr || !stop->load()); ++i) {
    StatusOr<Socket> accepted = AcceptTcp(*listener_, std::chrono::steady_clock::now());
    if (!accepted.ok()) {
      // Out of descriptors (EMFILE): the oldest waiting handshake gives its one up; with none
      // waiting, a short pause instead of a busy loop on the still readable listener.
      if (pending_.empty()) {
        Warn(accepted.status().message());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      } else {
        Closed(pending_.front(), HandshakeStep::Dropped("closed unauthenticated (" +
                                                        accepted.status().message() + ")"));
        pending_.pop_front();
      }
      return;
    }
    if (!accepted->valid()) return;
    if (static_cast<int>(pending_.size()) >= options_.max_pending) PushOutOne();
    PendingHandshake p;
    p.socket = std::move(accepted).value();
    p.peer = p.socket.PeerName();
    p.source = SourceOf(p.peer);
    p.deadline = std::chrono::steady_clock::now() + options_.handshake_timeout;
    StatusOr<Nonce> nonce = NewNonce();
    if (!nonce.ok()) {
      Closed(p, HandshakeStep::Dropped("not served: " + nonce.status().message()));
      continue;  // closes the connection
    }
    p.nonce = *nonce;
    if (!SendNow(p.socket, protocol_.hello(p.nonce))) {
      Closed(p, HandshakeStep::Dropped("gone before the hello"));
      continue;
    }
    pending_.push_back(std::move(p));
  }
}

}  // namespace tj::cluster
