#include "operator/api/failure_policy.h"

#include "common/utf8.h"

namespace tj::api {
namespace {

using json = nlohmann::json;

Status FieldError(const std::string& field, const std::string& what) {
  return Status::Error(field + ": " + what);
}

// The causes a rule may name: all but Resized, which is no failure.
constexpr size_t kRuleCauses = std::size(kAllRestartCauses) - 1;
std::string CauseList() {
  std::string all;
  for (RestartCause c : kAllRestartCauses) {
    if (c != RestartCause::kResized) all += (all.empty() ? "" : ", ") + ToString(c);
  }
  return all;
}

constexpr const char* kActionNames[] = {"RestartJob", "RestartJobAndIgnoreBackoffLimit", "FailJob"};

StatusOr<FailurePolicyRule> ParseRule(const json& r, const std::string& path) {
  if (!r.is_object()) return FieldError(path, "must be an object {name, action, onCauses}");
  FailurePolicyRule rule;
  if (auto n = r.find("name"); n != r.end() && !n->is_null()) {
    if (!n->is_string() || n->get_ref<const std::string&>().size() > 63) {
      return FieldError(path + ".name", "must be a string of at most 63 characters");
    }
    rule.name = n->get<std::string>();
  }
  auto a = r.find("action");
  if (a == r.end() || !a->is_string()) {
    return FieldError(path + ".action",
                      "required: one of RestartJob, RestartJobAndIgnoreBackoffLimit, FailJob");
  }
  bool known = false;
  for (int i = 0; i < 3; ++i) {
    if (*a == kActionNames[i]) {
      rule.action = static_cast<FailureAction>(i);
      known = true;
    }
  }
  if (!known) {
    return FieldError(path + ".action", "\"" + Utf8Prefix(a->get<std::string>(), 64) +
                                            "\" is not one of RestartJob, "
                                            "RestartJobAndIgnoreBackoffLimit, FailJob");
  }
  auto causes = r.find("onCauses");
  if (causes == r.end() || !causes->is_array() || causes->empty() || causes->size() > kRuleCauses) {
    return FieldError(path + ".onCauses", "required: a list of 1 to " +
                                              std::to_string(kRuleCauses) + " causes out of " +
                                              CauseList());
  }
  for (size_t i = 0; i < causes->size(); ++i) {
    const json& c = (*causes)[i];
    auto cause = c.is_string() ? ParseRestartCause(c.get<std::string>()) : std::nullopt;
    if (!cause || *cause == RestartCause::kResized) {
      return FieldError(path + ".onCauses[" + std::to_string(i) + "]",
                        "must be one of " + CauseList());
    }
    rule.on_causes.push_back(*cause);
  }
  return rule;
}

}  // namespace

std::string ToString(RestartCause c) {
  switch (c) {
    case RestartCause::kEvicted:
      return "Evicted";
    case RestartCause::kPreempted:
      return "Preempted";
    case RestartCause::kNodeLost:
      return "NodeLost";
    case RestartCause::kDeleted:
      return "Deleted";
    case RestartCause::kOperatorRestart:
      return "OperatorRestart";
    case RestartCause::kFailed:
      return "Failed";
    case RestartCause::kStalled:
      return "Stalled";
    case RestartCause::kResized:
      return "Resized";
  }
  return "Failed";
}

std::optional<RestartCause> ParseRestartCause(const std::string& s) {
  for (RestartCause c : kAllRestartCauses) {
    if (ToString(c) == s) return c;
  }
  return std::nullopt;
}

std::string ToString(FailureAction a) { return kActionNames[static_cast<int>(a)]; }

FailureAction DefaultActionFor(RestartCause cause) {
  return cause == RestartCause::kFailed || cause == RestartCause::kStalled
             ? FailureAction::kRestartJob
             : FailureAction::kRestartJobAndIgnoreBackoffLimit;
}

FailureAction FailurePolicy::ActionFor(RestartCause cause, std::string* rule) const {
  for (size_t i = 0; i < rules.size(); ++i) {
    for (RestartCause c : rules[i].on_causes) {
      if (c != cause) continue;
      if (rule) {
        *rule = rules[i].name.empty() ? "failurePolicy.rules[" + std::to_string(i) + "]"
                                      : rules[i].name;
      }
      return rules[i].action;
    }
  }
  if (rule) *rule = "default";
  return DefaultActionFor(cause);
}

StatusOr<FailurePolicy> ParseFailurePolicy(const json& spec) {
  FailurePolicy policy;
  auto fp = spec.find("failurePolicy");
  if (fp == spec.end() || fp->is_null()) return policy;
  if (!fp->is_object()) return FieldError("spec.failurePolicy", "must be an object {rules}");
  auto rules = fp->find("rules");
  if (rules == fp->end() || rules->is_null()) return policy;
  if (!rules->is_array() || rules->size() > kMaxFailurePolicyRules) {
    return FieldError("spec.failurePolicy.rules", "must be a list of at most " +
                                                      std::to_string(kMaxFailurePolicyRules) +
                                                      " rules {name, action, onCauses}");
  }
  for (size_t i = 0; i < rules->size(); ++i) {
    auto rule = ParseRule((*rules)[i], "spec.failurePolicy.rules[" + std::to_string(i) + "]");
    if (!rule.ok()) return rule.status();
    policy.rules.push_back(std::move(*rule));
  }
  return policy;
}

RestartCounts RestartCounts::FromJson(const json& status, int32_t restart_count) {
  RestartCounts r;
  r.backoff_limit_used = restart_count;
  if (!status.is_object()) return r;
  auto count = [](const json& obj, const char* key) -> std::optional<int32_t> {
    auto v = obj.find(key);
    if (v == obj.end() || !v->is_number_integer()) return std::nullopt;
    const int64_t n = v->get<int64_t>();
    if (n < 0 || n > INT32_MAX) return std::nullopt;
    return static_cast<int32_t>(n);
  };
  auto it = status.find("restarts");
  if (it == status.end() || !it->is_object()) {
    r.evaluator_backoff_limit_used = count(status, "evaluatorRestarts").value_or(0);
    return r;
  }
  if (auto used = count(*it, "backoffLimitUsed")) r.backoff_limit_used = *used;
  if (auto used = count(*it, "evaluatorBackoffLimitUsed")) r.evaluator_backoff_limit_used = *used;
  if (auto n = count(*it, "inPlace")) r.in_place = *n;
  if (auto n = count(*it, "inPlaceOfGang")) r.in_place_of_gang = *n;
  if (auto by = it->find("byCause"); by != it->end() && by->is_object()) {
    for (RestartCause c : kAllRestartCauses) {
      if (auto n = count(*by, ToString(c).c_str()); n && *n > 0) r.by_cause[ToString(c)] = *n;
    }
  }
  return r;
}

json RestartCounts::ToJson(int32_t gangs_made_again) const {
  json by = json::object();
  for (const auto& [cause, n] : by_cause) by[cause] = n;
  json j = {{"total", gangs_made_again + in_place},
            {"backoffLimitUsed", backoff_limit_used},
            {"byCause", by}};
  if (in_place > 0) j["inPlace"] = in_place;
  if (in_place_of_gang > 0) j["inPlaceOfGang"] = in_place_of_gang;
  if (evaluator_backoff_limit_used > 0) {
    j["evaluatorBackoffLimitUsed"] = evaluator_backoff_limit_used;
  }
  return j;
}

}  // namespace tj::api
