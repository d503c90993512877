// Builds a Prometheus text-format (0.0.4) exposition: "# HELP"/"# TYPE" once per metric
// name, then one sample line per label set. The trainer's /metrics (trainer/observe) and the
// operator's (operator/controller/metrics.h) are written with it.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/histogram.h"

namespace tj {

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  void Gauge(const std::string& name, const std::string& help, double value,
             const Labels& labels = {});
  void Counter(const std::string& name, const std::string& help, double value,
               const Labels& labels = {});
  // name_bucket{...,le="..."} per bound and +Inf, name_sum, name_count.
  void Histogram(const std::string& name, const std::string& help, const HistogramSnapshot& h,
                 const Labels& labels = {});
  // "# HELP" and "# TYPE" only: a family with no sample yet (a gauge not measured yet) is
  // still declared, so scrapers and dashboards can see every name.
  void Declare(const std::string& name, const std::string& help, const char* type);
  const std::string& str() const { return text_; }

  // "1.5", "NaN", "+Inf", "-Inf"; integers without a fraction.
  static std::string FormatValue(double value);
  // Escapes \, " and newline in a label value.
  static std::string EscapeLabel(const std::string& value);

 private:
  void Add(const std::string& name, const std::string& help, const char* type, double value,
           const Labels& labels);
  void Sample(const std::string& name, double value, const Labels& labels);

  std::map<std::string, std::string> types_;  // metric name -> type already declared
  std::string text_;
};

}  // namespace tj
