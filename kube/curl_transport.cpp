#include "kube/curl_transport.h"

#include <curl/curl.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <vector>

namespace tj::kube {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Checks that PEM data parses, so a bad kubeconfig fails at load with a clear message
// instead of at the first TLS handshake.
Status CheckPem(const std::string& pem, bool is_key, const char* what) {
  if (pem.empty()) return Status::Ok();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  bool ok;
  if (is_key) {
    EVP_PKEY* k = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    ok = k != nullptr;
    EVP_PKEY_free(k);
  } else {
    X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    ok = x != nullptr;
    X509_free(x);
  }
  BIO_free(bio);
  if (!ok) return Status::Error(std::string(what) + " is not valid PEM data");
  return Status::Ok();
}

// What one exchange collects through libcurl's callbacks.
struct Exchange {
  CURL* handle = nullptr;
  HttpResponse response;
  // Stream(): the body of a 200 answer goes here instead of into response.body.
  const std::function<bool(std::string_view)>* on_data = nullptr;
  bool reader_stopped = false;  // on_data returned false
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const std::string_view line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    x->response.headers.clear();  // a new response begins (e.g. after "100 Continue")
  } else if (auto colon = line.find(':'); colon != std::string_view::npos) {
    x->response.headers[Lower(Trim(line.substr(0, colon)))] =
        std::string(Trim(line.substr(colon + 1)));
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t len = size * n;
  if (x->on_data != nullptr) {
    long code = 0;
    curl_easy_getinfo(x->handle, CURLINFO_RESPONSE_CODE, &code);
    if (code == 200) {
      if ((*x->on_data)(std::string_view(data, len))) return len;
      x->reader_stopped = true;
      return len == 0 ? 1 : 0;  // any other count than len ends the transfer
    }
  }
  x->response.body.append(data, len);
  return len;
}

// A watch's socket, so that a stop request can end a read that is waiting for bytes:
// shutdown() wakes it at once (libcurl's progress callback would only notice within a second).
// The socket is forgotten when libcurl closes it, so that a number the kernel hands out again
// is never shut down by mistake.
struct StreamSocket {
  std::mutex mu;
  curl_socket_t fd = CURL_SOCKET_BAD;  // GUARDED_BY(mu)
  bool stopped = false;                // GUARDED_BY(mu)

  void Stop() {
    std::lock_guard<std::mutex> lock(mu);
    stopped = true;
    if (fd != CURL_SOCKET_BAD) ::shutdown(fd, SHUT_RDWR);
  }
};

int OnSocketOpened(void* user, curl_socket_t fd, curlsocktype) {
  auto* s = static_cast<StreamSocket*>(user);
  std::lock_guard<std::mutex> lock(s->mu);
  s->fd = fd;
  if (s->stopped) ::shutdown(fd, SHUT_RDWR);
  return CURL_SOCKOPT_OK;
}

int OnSocketClose(void* user, curl_socket_t fd) {
  auto* s = static_cast<StreamSocket*>(user);
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->fd == fd) s->fd = CURL_SOCKET_BAD;
  return ::close(fd);
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<std::stop_token*>(user)->stop_requested() ? 1 : 0;  // 1 aborts
}

struct HeaderList {
  curl_slist* list = nullptr;
  void Add(const std::string& h) { list = curl_slist_append(list, h.c_str()); }
  ~HeaderList() { curl_slist_free_all(list); }
};

// TLS sessions shared by every handle of a transport: a new connection (a burst of parallel
// creates opens one per request in flight) resumes the session of an earlier one instead of
// making a full handshake, which costs both sides a signature and a certificate check.
class SharedTlsSessions {
 public:
  SharedTlsSessions() : share_(curl_share_init()) {
    if (share_ == nullptr) return;  // no memory: every connection makes a full handshake
    curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, Lock);
    curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, Unlock);
    curl_share_setopt(share_, CURLSHOPT_USERDATA, this);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  }
  ~SharedTlsSessions() {
    if (share_ != nullptr) curl_share_cleanup(share_);
  }
  SharedTlsSessions(const SharedTlsSessions&) = delete;
  SharedTlsSessions& operator=(const SharedTlsSessions&) = delete;

  CURLSH* get() const { return share_; }

 private:
  static void Lock(CURL*, curl_lock_data data, curl_lock_access, void* user) {
    static_cast<SharedTlsSessions*>(user)->mu_[data].lock();
  }
  static void Unlock(CURL*, curl_lock_data data, void* user) {
    static_cast<SharedTlsSessions*>(user)->mu_[data].unlock();
  }

  CURLSH* share_;
  std::mutex mu_[CURL_LOCK_DATA_LAST];
};

class CurlTransport final : public HttpTransport {
 public:
  explicit CurlTransport(RestConfig config) : config_(std::move(config)) {}

  ~CurlTransport() override {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }

  Result<HttpResponse> Send(const HttpRequest& request) override {
    CURL* h = Acquire();
    Exchange x;
    HeaderList headers;
    char error[CURL_ERROR_SIZE] = {0};
    Prepare(h, request, &x, &headers, error);
    const long timeout_ms = static_cast<long>(std::chrono::milliseconds(config_.timeout).count());
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    const CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    Release(h);
    if (rc != CURLE_OK) return TransportError(request, rc, error);
    x.response.status = static_cast<int>(code);
    return std::move(x.response);
  }

  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<bool(std::string_view)>& on_data,
                              std::stop_token stop) override {
    // A handle of its own: a watch holds its connection for minutes.
    CURL* h = curl_easy_init();
    if (h == nullptr) return ApiError{0, "", "libcurl: no memory for a handle", Name(request), 0};
    Exchange x;
    x.on_data = &on_data;
    HeaderList headers;
    char error[CURL_ERROR_SIZE] = {0};
    Prepare(h, request, &x, &headers, error);
    StreamSocket socket;
    curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, OnSocketOpened);
    curl_easy_setopt(h, CURLOPT_SOCKOPTDATA, &socket);
    curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, OnSocketClose);
    curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, &socket);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &stop);
    // No byte for request.timeout ends the stream (and connecting may take as long).
    const long timeout_s = std::max<long>(1, static_cast<long>(request.timeout.count()));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, timeout_s);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, timeout_s);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    CURLcode rc;
    {
      std::stop_callback on_stop(stop, [&socket] { socket.Stop(); });
      rc = curl_easy_perform(h);
    }
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);  // closes the socket (OnSocketClose) while `socket` still exists
    x.response.status = static_cast<int>(code);
    if (rc == CURLE_OK || x.reader_stopped || stop.stop_requested()) {
      if (stop.stop_requested() || x.reader_stopped) x.response.status = 200;
      return std::move(x.response);
    }
    return TransportError(request, rc, error);
  }

 private:
  static std::string Name(const HttpRequest& r) { return r.method + " " + r.path_and_query; }

  static ApiError TransportError(const HttpRequest& r, CURLcode rc, const char* error) {
    std::string what = error[0] != '\0' ? error : curl_easy_strerror(rc);
    return ApiError{0, "", what, Name(r), 0};
  }

  CURL* Acquire() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        curl_easy_reset(h);  // options only: the live connection stays for reuse
        return h;
      }
    }
    return curl_easy_init();
  }

  void Release(CURL* h) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(h);
  }

  // Everything but timeouts, the same for both kinds of exchange.
  void Prepare(CURL* h, const HttpRequest& r, Exchange* x, HeaderList* headers, char* error) const {
    x->handle = h;
    curl_easy_setopt(h, CURLOPT_URL, (config_.server + r.path_and_query).c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(h, CURLOPT_PROXY, "");  // as client-go's default transport would not
    if (tls_sessions_.get() != nullptr) curl_easy_setopt(h, CURLOPT_SHARE, tls_sessions_.get());
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    SetTls(h);

    if (r.method == "GET") {
      curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    headers->Add("Accept: application/json");
    headers->Add("User-Agent: " + config_.user_agent);
    headers->Add("Expect:");  // no "100-continue" round trip before a body
    if (!r.authorization.empty()) headers->Add("Authorization: " + r.authorization);
    if (!r.content_type.empty() || !r.body.empty()) {
      headers->Add("Content-Type: " +
                   (r.content_type.empty() ? std::string("application/json") : r.content_type));
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers->list);
  }

  void SetTls(CURL* h) const {
    if (config_.insecure_skip_tls_verify) {
      curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (!config_.ca_pem.empty()) {
      // Only the configuration's CAs: not the system's store as well.
      curl_blob ca{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(),
                   CURL_BLOB_NOCOPY};
      curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
      curl_easy_setopt(h, CURLOPT_CAINFO, nullptr);
      curl_easy_setopt(h, CURLOPT_CAPATH, nullptr);
    }
    if (!config_.client_cert_pem.empty()) {
      curl_blob cert{const_cast<char*>(config_.client_cert_pem.data()),
                     config_.client_cert_pem.size(), CURL_BLOB_NOCOPY};
      curl_blob key{const_cast<char*>(config_.client_key_pem.data()), config_.client_key_pem.size(),
                    CURL_BLOB_NOCOPY};
      curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cert);
      curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &key);
      curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
  }

  const RestConfig config_;
  SharedTlsSessions tls_sessions_;  // outlives every handle: they are cleaned up first
  std::mutex mu_;
  std::vector<CURL*> idle_;  // handles not in use, each with its live connection. GUARDED_BY(mu_)
};

}  // namespace

StatusOr<std::unique_ptr<HttpTransport>> NewCurlTransport(const RestConfig& config) {
  TJ_RETURN_IF_ERROR(CheckPem(config.ca_pem, false, "the certificate authority"));
  TJ_RETURN_IF_ERROR(CheckPem(config.client_cert_pem, false, "the client certificate"));
  TJ_RETURN_IF_ERROR(CheckPem(config.client_key_pem, true, "the client key"));
  if (config.server.empty()) return Status::Error("the configuration names no API server");
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (init != CURLE_OK) {
    return Status::Error(std::string("libcurl failed to initialize: ") + curl_easy_strerror(init));
  }
  return std::unique_ptr<HttpTransport>(std::make_unique<CurlTransport>(config));
}

}  // namespace tj::kube
