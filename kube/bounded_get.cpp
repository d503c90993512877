#include "kube/bounded_get.h"

#include <curl/curl.h>

#include <memory>

namespace tj::kube {
namespace {

struct Sink {
  std::string body;
  size_t max_bytes;
  bool overflow = false;
};

size_t Write(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t len = size * n;
  if (sink->body.size() + len > sink->max_bytes) {
    sink->overflow = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  sink->body.append(data, len);
  return len;
}

}  // namespace

StatusOr<std::string> BoundedGet(const std::string& host, int port, const std::string& path,
                                 const BoundedGetLimits& limits) {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  // An IPv6 address (a pod IP on an IPv6 or dual-stack cluster) goes in brackets in a URL.
  const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  const std::string url =
      "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + path;
  if (init != CURLE_OK) return Status::Error("GET " + url + ": libcurl failed to initialize");
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> h(curl_easy_init(), curl_easy_cleanup);
  if (!h) return Status::Error("GET " + url + ": libcurl failed to initialize");
  Sink sink{.body = {}, .max_bytes = limits.max_bytes};
  curl_easy_setopt(h.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(h.get(), CURLOPT_PROTOCOLS_STR, "http");
  curl_easy_setopt(h.get(), CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(limits.timeout.count()));
  curl_easy_setopt(h.get(), CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(limits.timeout.count()));
  curl_easy_setopt(h.get(), CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(limits.max_bytes));
  curl_easy_setopt(h.get(), CURLOPT_WRITEFUNCTION, Write);
  curl_easy_setopt(h.get(), CURLOPT_WRITEDATA, &sink);
  const CURLcode rc = curl_easy_perform(h.get());
  if (sink.overflow || rc == CURLE_FILESIZE_EXCEEDED) {
    return Status::Error("GET " + url + ": the answer is longer than " +
                         std::to_string(limits.max_bytes) + " bytes");
  }
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    return Status::Error(StatusCode::kDeadlineExceeded, "GET " + url + ": no whole answer within " +
                                                            std::to_string(limits.timeout.count()) +
                                                            " ms");
  }
  if (rc != CURLE_OK) return Status::Error("GET " + url + ": " + curl_easy_strerror(rc));
  long code = 0;
  curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) return Status::Error("GET " + url + ": HTTP " + std::to_string(code));
  return std::move(sink.body);
}

}  // namespace tj::kube
