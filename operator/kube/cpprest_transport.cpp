#include "operator/kube/cpprest_transport.h"

#include <cpprest/http_client.h>
#include <cpprest/producerconsumerstream.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace tj::kube {
namespace {

namespace http = web::http;
using Traits = concurrency::streams::char_traits<uint8_t>;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
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

class CppRestTransport final : public HttpTransport {
 public:
  explicit CppRestTransport(RestConfig config)
      : config_(std::move(config)), client_(config_.server, ClientConfig(config_.timeout)) {}

  Result<HttpResponse> Send(const HttpRequest& request) override {
    std::string what = request.method + " " + request.path_and_query;
    try {
      // One client (and its connection pool) for all exchanges; it is thread-safe.
      http::http_response resp = client_.request(ToCppRest(request)).get();
      HttpResponse out;
      out.status = resp.status_code();
      out.headers = Headers(resp);
      auto bytes = resp.extract_vector().get();
      out.body.assign(bytes.begin(), bytes.end());
      return out;
    } catch (const std::exception& e) {
      return ApiError{0, "", e.what(), what, 0};
    }
  }

  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<bool(std::string_view)>& on_data,
                              std::stop_token stop) override {
    std::string what = request.method + " " + request.path_and_query;
    pplx::cancellation_token_source cts;
    std::stop_callback on_stop(stop, [&cts] { cts.cancel(); });
    try {
      http::client::http_client client(config_.server, ClientConfig(request.timeout));
      http::http_response resp = client.request(ToCppRest(request), cts.get_token()).get();
      HttpResponse out;
      out.status = resp.status_code();
      out.headers = Headers(resp);
      if (out.status != http::status_codes::OK) {
        auto bytes = resp.extract_vector().get();
        out.body.assign(bytes.begin(), bytes.end());
        return out;
      }
      auto buf = resp.body().streambuf();
      // Cancelling the request does not end a body that is being read: closing the buffer's
      // write side does (a pending read sees the end, the client's next write fails and it
      // drops the connection).
      std::stop_callback close_body(stop, [buf]() mutable { buf.close(std::ios_base::out); });
      std::string chunk;
      while (!stop.stop_requested()) {
        // Wait for one byte, then take whatever else has already arrived.
        auto c = buf.bumpc().get();
        if (c == Traits::eof()) break;
        chunk.assign(1, static_cast<char>(c));
        size_t avail = buf.in_avail();
        if (avail > 0) {
          size_t old = chunk.size();
          chunk.resize(old + avail);
          size_t got = buf.getn(reinterpret_cast<uint8_t*>(chunk.data() + old), avail).get();
          if (got > avail) got = 0;  // "requires async": nothing taken
          chunk.resize(old + got);
        }
        if (!on_data(chunk)) break;
      }
      return out;
    } catch (const pplx::task_canceled&) {
      HttpResponse out;
      out.status = 200;
      return out;  // stopped on request
    } catch (const std::exception& e) {
      if (stop.stop_requested()) {
        HttpResponse out;
        out.status = 200;
        return out;
      }
      return ApiError{0, "", e.what(), what, 0};
    }
  }

 private:
  http::client::http_client_config ClientConfig(std::chrono::seconds timeout) const {
    http::client::http_client_config cc;
    cc.set_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    cc.set_validate_certificates(!config_.insecure_skip_tls_verify);
    std::string ca = config_.ca_pem, cert = config_.client_cert_pem, key = config_.client_key_pem;
    const bool own_trust = !ca.empty() || config_.insecure_skip_tls_verify;
    cc.set_ssl_context_callback([ca, cert, key, own_trust](boost::asio::ssl::context& ctx) {
      // cpprestsdk gives every connection its own context with the system's trust store
      // loaded (about a megabyte each). With a CA of our own that store is never consulted:
      // an empty one instead keeps a pool of connections small.
      if (own_trust) SSL_CTX_set_cert_store(ctx.native_handle(), X509_STORE_new());
      if (!ca.empty()) {
        ctx.add_certificate_authority(boost::asio::buffer(ca.data(), ca.size()));
      }
      if (!cert.empty()) {
        ctx.use_certificate_chain(boost::asio::buffer(cert.data(), cert.size()));
        ctx.use_private_key(boost::asio::buffer(key.data(), key.size()),
                            boost::asio::ssl::context::pem);
      }
    });
    return cc;
  }

  http::http_request ToCppRest(const HttpRequest& r) const {
    http::http_request req(r.method);
    req.set_request_uri(r.path_and_query);
    req.headers().add("Accept", "application/json");
    req.headers().add("User-Agent", config_.user_agent);
    if (!r.authorization.empty()) req.headers().add("Authorization", r.authorization);
    if (!r.content_type.empty() || !r.body.empty()) {
      req.set_body(r.body, r.content_type.empty() ? "application/json" : r.content_type);
    }
    return req;
  }

  static std::map<std::string, std::string> Headers(const http::http_response& resp) {
    std::map<std::string, std::string> h;
    for (const auto& [k, v] : resp.headers()) h[Lower(k)] = v;
    return h;
  }

  RestConfig config_;
  http::client::http_client client_;
};

}  // namespace

StatusOr<std::unique_ptr<HttpTransport>> NewCppRestTransport(const RestConfig& config) {
  TJ_RETURN_IF_ERROR(CheckPem(config.ca_pem, false, "the certificate authority"));
  TJ_RETURN_IF_ERROR(CheckPem(config.client_cert_pem, false, "the client certificate"));
  TJ_RETURN_IF_ERROR(CheckPem(config.client_key_pem, true, "the client key"));
  if (config.server.empty()) return Status::Error("the configuration names no API server");
  if (!config.ca_pem.empty() || config.insecure_skip_tls_verify) {
    // cpprestsdk loads the system's trust store into every new connection before our
    // callback replaces it: ~140 certificates parsed, a few milliseconds of CPU each time.
    // With a CA of our own it is never consulted: point OpenSSL at an empty one, unless the
    // user chose a file (SSL_CERT_FILE is OpenSSL's own override).
    ::setenv("SSL_CERT_FILE", "/dev/null", /*overwrite=*/0);
  }
  return std::unique_ptr<HttpTransport>(std::make_unique<CppRestTransport>(config));
}

}  // namespace tj::kube
