// FakeTransport: an HTTP exchange with the API server as unit tests fake it behind
// kube::HttpTransport, for what sits on a transport (RestClient, MeteredTransport, the pod log
// reader). It answers from a script, takes as long as told on a FakeClock, and records every
// request it is sent.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/thread_annotations.h"
#include "kube/http_transport.h"

namespace tj::testing {

class FakeTransport : public kube::HttpTransport {
 public:
  // `clock`, when not null, moves on by `takes` in each exchange and by `between_lines` within
  // a streamed answer; it must outlive the transport.
  explicit FakeTransport(FakeClock* clock = nullptr) : clock_(clock) {}

  // An answer of `status` with `body`.
  static kube::HttpResponse Answer(int status, std::string body = "");
  // A failure to get an answer (connection refused, timeout): an error of code 0.
  static kube::ApiError NoAnswer(std::string why);

  // The script. A test sets and reads these while no exchange is in flight; exchanges use them
  // under the transport's lock.
  //
  // The answers to the next exchanges, one each, in order.
  std::deque<kube::Result<kube::HttpResponse>> answers;
  // The answer to each exchange once `answers` are used up.
  kube::Result<kube::HttpResponse> otherwise = NoAnswer("no answer scripted");
  // How long each exchange takes before it answers, on the clock.
  std::chrono::milliseconds takes{0};
  // How long a streamed answer stays open between two of its lines, on the clock.
  std::chrono::milliseconds between_lines{0};
  // Every request sent, in order.
  std::vector<kube::HttpRequest> requests;

  kube::Result<kube::HttpResponse> Send(const kube::HttpRequest& request) override;
  // A 200 answer's body goes to `on_data` a line at a time (as a watch's events come) until
  // `on_data` returns false, and the exchange answers 200 with no body; any other answer is
  // returned as it is.
  kube::Result<kube::HttpResponse> Stream(const kube::HttpRequest& request,
                                          const std::function<bool(std::string_view)>& on_data,
                                          std::stop_token stop) override;

 private:
  // Records `request`, advances the clock by `takes` and takes the next answer.
  kube::Result<kube::HttpResponse> Next(const kube::HttpRequest& request);

  FakeClock* const clock_;
  Mutex mu_;
};

}  // namespace tj::testing
