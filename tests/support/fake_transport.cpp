#include "tests/support/fake_transport.h"

#include <utility>

namespace tj::testing {

kube::HttpResponse FakeTransport::Answer(int status, std::string body) {
  kube::HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

kube::ApiError FakeTransport::NoAnswer(std::string why) {
  kube::ApiError e;
  e.message = std::move(why);
  return e;
}

kube::Result<kube::HttpResponse> FakeTransport::Next(const kube::HttpRequest& request) {
  MutexLock lock(mu_);
  requests.push_back(request);
  if (clock_ != nullptr) clock_->Advance(takes);
  if (answers.empty()) return otherwise;
  kube::Result<kube::HttpResponse> a = std::move(answers.front());
  answers.pop_front();
  return a;
}

kube::Result<kube::HttpResponse> FakeTransport::Send(const kube::HttpRequest& request) {
  return Next(request);
}

kube::Result<kube::HttpResponse> FakeTransport::Stream(
    const kube::HttpRequest& request, const std::function<bool(std::string_view)>& on_data,
    std::stop_token) {
  kube::Result<kube::HttpResponse> a = Next(request);
  if (!a.ok() || a->status != 200) return a;
  std::chrono::milliseconds pause;
  {
    MutexLock lock(mu_);
    pause = between_lines;
  }
  const std::string_view body = a->body;
  for (size_t start = 0; start < body.size();) {
    if (start > 0 && clock_ != nullptr) clock_->Advance(pause);
    const size_t end = body.find('\n', start);
    const size_t next = end == std::string_view::npos ? body.size() : end + 1;
    if (!on_data(body.substr(start, next - start))) break;
    start = next;
  }
  return Answer(200);
}

}  // namespace tj::testing
