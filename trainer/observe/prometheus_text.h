// Builds a Prometheus text-format (0.0.4) exposition: "# HELP"/"# TYPE" once per metric
// name, then one sample line per label set. For StatusServer's /metrics callback.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tj::observe {

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  void Gauge(const std::string& name, const std::string& help, double value,
             const Labels& labels = {});
  void Counter(const std::string& name, const std::string& help, double value,
               const Labels& labels = {});
  const std::string& str() const { return text_; }

  // "1.5", "NaN", "+Inf", "-Inf"; integers without a fraction.
  static std::string FormatValue(double value);
  // Escapes \, " and newline in a label value.
  static std::string EscapeLabel(const std::string& value);

 private:
  void Add(const std::string& name, const std::string& help, const char* type, double value,
           const Labels& labels);

  std::map<std::string, std::string> types_;  // metric name -> type already declared
  std::string text_;
};

}  // namespace tj::observe
