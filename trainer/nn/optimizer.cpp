#include "trainer/nn/optimizer.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <sstream>

#include "trainer/nn/adam.h"

namespace tj::nn {

Sgd::Sgd(size_t count, SgdConfig config)
    : config_(config), count_(count), momentum_(config.momentum > 0.0f ? count : 0, 0.0f) {}

void Sgd::Apply(float* params, const float* grad, double learning_rate, ThreadPool* pool) {
  ++iterations_;
  const float lr = static_cast<float>(learning_rate);
  const float mu = config_.momentum;
  const bool nesterov = config_.nesterov;
  float* m = momentum_.data();
  pool->Run([&](int member, int members) {
    auto [begin, end] = SplitRange(static_cast<int>(count_), members, member);
    if (m == nullptr) {
      for (int i = begin; i < end; ++i) params[i] -= lr * grad[i];
      return;
    }
    for (int i = begin; i < end; ++i) {
      const float step = -grad[i] * lr;
      m[i] = m[i] * mu + step;
      params[i] += nesterov ? m[i] * mu + step : m[i];
    }
  });
}

void Sgd::Restore(std::vector<float> momentum, int64_t iterations) {
  momentum_ = std::move(momentum);
  iterations_ = iterations;
}

void ApplyWeightDecay(float* params, size_t count, double weight_decay, double learning_rate,
                      const std::vector<uint8_t>& decayed, ThreadPool* pool) {
  if (weight_decay == 0.0) return;
  const float factor = static_cast<float>(weight_decay * learning_rate);
  pool->Run([&](int member, int members) {
    auto [begin, end] = SplitRange(static_cast<int>(count), members, member);
    for (int i = begin; i < end; ++i) {
      if (decayed.empty() || decayed[i] != 0) params[i] -= params[i] * factor;
    }
  });
}

namespace {

// A finite, positive number: the whole of `text`.
bool ParseRate(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (*end != '\0' || errno != 0 || !std::isfinite(v) || v <= 0.0) return false;
  *out = v;
  return true;
}

bool ParseCount(const std::string& text, int64_t lo, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || v < lo) return false;
  *out = v;
  return true;
}

std::vector<std::string> SplitOn(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

std::string Number(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

}  // namespace

StatusOr<LearningRateSchedule> LearningRateSchedule::Parse(const std::string& text) {
  const std::string expected =
      "expected seeds, constant:LR, step:LR@1,LR2@E2,... (epochs increasing from 1) or "
      "cosine:LR[,warmup=STEPS][,alpha=A], rates positive, e.g. cosine:0.1,warmup=500";
  auto refuse = [&](const std::string& why) {
    return Status::Error("learning-rate schedule '" + text + "': " + why + "; " + expected);
  };
  LearningRateSchedule s;
  if (text == "seeds") return s;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (kind == "constant") {
    if (!ParseRate(rest, &s.rate_))
      return refuse("the rate '" + rest + "' is not a positive number");
    s.kind_ = Kind::kConstant;
    return s;
  }
  if (kind == "step") {
    s.kind_ = Kind::kStep;
    for (const std::string& part : SplitOn(rest, ',')) {
      const size_t at = part.find('@');
      double rate = 0.0;
      int64_t epoch = 0;
      if (at == std::string::npos || !ParseRate(part.substr(0, at), &rate) ||
          !ParseCount(part.substr(at + 1), 1, &epoch) || epoch > 1000000) {
        return refuse("'" + part + "' is not RATE@EPOCH");
      }
      if (s.steps_.empty() ? epoch != 1 : epoch <= s.steps_.back().first) {
        return refuse(s.steps_.empty() ? "the first rate must start at epoch 1 (@1)"
                                       : "epochs must increase ('" + part + "')");
      }
      s.steps_.emplace_back(static_cast<int>(epoch), rate);
    }
    if (s.steps_.empty()) return refuse("no rates");
    return s;
  }
  if (kind == "cosine") {
    s.kind_ = Kind::kCosine;
    const std::vector<std::string> parts = SplitOn(rest, ',');
    if (parts.empty() || !ParseRate(parts[0], &s.rate_)) {
      return refuse("the peak rate is not a positive number");
    }
    for (size_t i = 1; i < parts.size(); ++i) {
      if (parts[i].rfind("warmup=", 0) == 0) {
        if (!ParseCount(parts[i].substr(7), 0, &s.warmup_)) return refuse("'" + parts[i] + "'");
      } else if (parts[i].rfind("alpha=", 0) == 0) {
        const std::string a = parts[i].substr(6);
        char* end = nullptr;
        s.alpha_ = std::strtod(a.c_str(), &end);
        if (a.empty() || *end != '\0' || !(s.alpha_ >= 0.0 && s.alpha_ <= 1.0)) {
          return refuse("alpha '" + a + "' is not in [0, 1]");
        }
      } else {
        return refuse("'" + parts[i] + "' is neither warmup=STEPS nor alpha=A");
      }
    }
    return s;
  }
  return refuse("unknown schedule '" + kind + "'");
}

double LearningRateSchedule::At(int epoch, int64_t step, int64_t total_steps) const {
  switch (kind_) {
    case Kind::kSeeds:
      return LearningRateForEpoch(epoch);
    case Kind::kConstant:
      return rate_;
    case Kind::kStep: {
      double rate = steps_.front().second;
      for (const auto& [first, r] : steps_) {
        if (epoch >= first) rate = r;
      }
      return rate;
    }
    case Kind::kCosine: {
      if (step < warmup_) return rate_ * static_cast<double>(step) / static_cast<double>(warmup_);
      const double decay_steps = static_cast<double>(std::max<int64_t>(total_steps - warmup_, 1));
      const double t = std::min(static_cast<double>(step - warmup_), decay_steps);
      const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * t / decay_steps));
      return rate_ * ((1.0 - alpha_) * cosine + alpha_);
    }
  }
  return 0.0;
}

std::string LearningRateSchedule::ToString() const {
  switch (kind_) {
    case Kind::kSeeds:
      return "seeds";
    case Kind::kConstant:
      return "constant:" + Number(rate_);
    case Kind::kStep: {
      std::string out = "step:";
      for (size_t i = 0; i < steps_.size(); ++i) {
        out += (i ? "," : "") + Number(steps_[i].second) + "@" + std::to_string(steps_[i].first);
      }
      return out;
    }
    case Kind::kCosine:
      return "cosine:" + Number(rate_) + ",warmup=" + std::to_string(warmup_) +
             ",alpha=" + Number(alpha_);
  }
  return "";
}

}  // namespace tj::nn
