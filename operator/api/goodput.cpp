#include "operator/api/goodput.h"

namespace tj::api {

using nlohmann::json;

namespace {

std::optional<double> NumberAt(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return v >= 0 ? std::optional<double>(v) : std::nullopt;
}

std::optional<std::string> TextAt(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

Goodput Goodput::FromJson(const json& j) {
  Goodput g;
  if (!j.is_object()) return g;
  g.queued_seconds = NumberAt(j, "queuedSeconds").value_or(0);
  g.time_to_first_step_seconds = NumberAt(j, "timeToFirstStepSeconds");
  g.ratio = NumberAt(j, "ratio");
  g.training_since = TextAt(j, "trainingSince");
  if (auto r = j.find("recovering"); r != j.end() && r->is_object()) {
    g.recovering_cause = TextAt(*r, "cause");
    g.recovering_since = TextAt(*r, "since");
    if (!g.recovering_cause || !g.recovering_since) g.recovering_cause = g.recovering_since = {};
  }
  if (auto lost = j.find("lost"); lost != j.end() && lost->is_object()) {
    for (const auto& [cause, l] : lost->items()) {
      if (!l.is_object()) continue;
      GoodputLoss loss;
      auto restarts = l.find("restarts");
      if (restarts != l.end() && restarts->is_number_integer() && *restarts >= 0 &&
          *restarts <= INT32_MAX) {
        loss.restarts = restarts->get<int32_t>();
      }
      loss.seconds = NumberAt(l, "seconds").value_or(0);
      auto steps = l.find("steps");
      if (steps != l.end() && steps->is_number_integer() && *steps >= 0) {
        loss.steps = steps->get<int64_t>();
      }
      g.lost[cause] = loss;
    }
  }
  return g;
}

json Goodput::ToJson() const {
  json j = json::object();
  j["queuedSeconds"] = queued_seconds;
  if (time_to_first_step_seconds) j["timeToFirstStepSeconds"] = *time_to_first_step_seconds;
  if (!lost.empty()) {
    json l = json::object();
    for (const auto& [cause, loss] : lost) {
      l[cause] = {{"restarts", loss.restarts}, {"seconds", loss.seconds}, {"steps", loss.steps}};
    }
    j["lost"] = std::move(l);
  }
  if (ratio) j["ratio"] = *ratio;
  if (training_since) j["trainingSince"] = *training_since;
  if (recovering_cause && recovering_since) {
    j["recovering"] = {{"cause", *recovering_cause}, {"since", *recovering_since}};
  }
  return j;
}

}  // namespace tj::api
