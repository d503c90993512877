#include "common/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace tj {

std::string PrometheusText::FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : "NaN";
}

std::string PrometheusText::EscapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void PrometheusText::Declare(const std::string& name, const std::string& help, const char* type) {
  if (!types_.emplace(name, type).second) return;
  std::string escaped_help;
  for (char c : help) {
    escaped_help += c == '\n'   ? std::string("\\n")
                    : c == '\\' ? std::string("\\\\")
                                : std::string(1, c);
  }
  text_ += "# HELP " + name + " " + escaped_help + "\n# TYPE " + name + " " + type + "\n";
}

void PrometheusText::Sample(const std::string& name, double value, const Labels& labels) {
  text_ += name;
  if (!labels.empty()) {
    text_ += "{";
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) text_ += ',';
      text_.append(labels[i].first)
          .append("=\"")
          .append(EscapeLabel(labels[i].second))
          .append("\"");
    }
    text_ += "}";
  }
  text_.append(" ").append(FormatValue(value)).append("\n");
}

void PrometheusText::Add(const std::string& name, const std::string& help, const char* type,
                         double value, const Labels& labels) {
  Declare(name, help, type);
  Sample(name, value, labels);
}

void PrometheusText::Histogram(const std::string& name, const std::string& help,
                               const HistogramSnapshot& h, const Labels& labels) {
  Declare(name, help, "histogram");
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    Labels l = labels;
    l.emplace_back("le", FormatValue(h.bounds[i]));
    Sample(name + "_bucket", static_cast<double>(h.cumulative[i]), l);
  }
  Labels inf = labels;
  inf.emplace_back("le", "+Inf");
  Sample(name + "_bucket", static_cast<double>(h.count), inf);
  Sample(name + "_sum", h.sum, labels);
  Sample(name + "_count", static_cast<double>(h.count), labels);
}

void PrometheusText::Gauge(const std::string& name, const std::string& help, double value,
                           const Labels& labels) {
  Add(name, help, "gauge", value, labels);
}

void PrometheusText::Counter(const std::string& name, const std::string& help, double value,
                             const Labels& labels) {
  Add(name, help, "counter", value, labels);
}

}  // namespace tj
