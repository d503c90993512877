// spec.failurePolicy: parsing (errors name the field), the first rule naming a cause decides,
// the defaults, and status.restarts read from old and new statuses.
#include "operator/api/failure_policy.h"

#include <gtest/gtest.h>

namespace tj::api {
namespace {

using nlohmann::json;

TEST(FailurePolicy, AbsentOrNullMeansTheDefaults) {
  for (const json& spec : {json::object(), json{{"failurePolicy", nullptr}},
                           json{{"failurePolicy", {{"rules", nullptr}}}}}) {
    auto p = ParseFailurePolicy(spec);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_TRUE(p->rules.empty());
  }
}

// A stall counts too: a program that hangs every time must end, not restart for ever.
TEST(FailurePolicy, DefaultsCountOnlyTheProgramsFailuresAndStalls) {
  const FailurePolicy none;
  for (RestartCause c : kAllRestartCauses) {
    const FailureAction want = c == RestartCause::kFailed || c == RestartCause::kStalled
                                   ? FailureAction::kRestartJob
                                   : FailureAction::kRestartJobAndIgnoreBackoffLimit;
    std::string rule;
    EXPECT_EQ(none.ActionFor(c, &rule), want) << ToString(c);
    EXPECT_EQ(rule, "default");
  }
}

TEST(FailurePolicy, FirstRuleNamingTheCauseDecidesOthersKeepTheDefault) {
  json spec = {
      {"failurePolicy",
       {{"rules",
         json::array(
             {{{"name", "evictions-count"}, {"action", "RestartJob"}, {"onCauses", {"Evicted"}}},
              {{"action", "FailJob"}, {"onCauses", {"Evicted", "Failed"}}}})}}}};
  auto p = ParseFailurePolicy(spec);
  ASSERT_TRUE(p.ok()) << p.status().message();
  std::string rule;
  EXPECT_EQ(p->ActionFor(RestartCause::kEvicted, &rule), FailureAction::kRestartJob);
  EXPECT_EQ(rule, "evictions-count");
  EXPECT_EQ(p->ActionFor(RestartCause::kFailed, &rule), FailureAction::kFailJob);
  EXPECT_EQ(rule, "failurePolicy.rules[1]");
  EXPECT_EQ(p->ActionFor(RestartCause::kPreempted, &rule),
            FailureAction::kRestartJobAndIgnoreBackoffLimit);
  EXPECT_EQ(rule, "default");
}

struct BadPolicy {
  const char* name;
  json policy;
  const char* message;
};

class BadFailurePolicy : public ::testing::TestWithParam<BadPolicy> {};

TEST_P(BadFailurePolicy, IsRefusedNamingTheField) {
  auto p = ParseFailurePolicy({{"failurePolicy", GetParam().policy}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadFailurePolicy,
    ::testing::Values(
        BadPolicy{"NotAnObject", json::array(), "spec.failurePolicy: must be an object {rules}"},
        BadPolicy{"RulesNotAList",
                  {{"rules", "x"}},
                  "spec.failurePolicy.rules: must be a list of at most 32 rules {name, action, "
                  "onCauses}"},
        BadPolicy{"RuleNotAnObject",
                  {{"rules", {1}}},
                  "spec.failurePolicy.rules[0]: must be an object {name, action, onCauses}"},
        BadPolicy{"NoAction",
                  {{"rules", {{{"onCauses", {"Evicted"}}}}}},
                  "spec.failurePolicy.rules[0].action: required: one of RestartJob, "
                  "RestartJobAndIgnoreBackoffLimit, FailJob"},
        BadPolicy{"UnknownAction",
                  {{"rules", {{{"action", "Ignore"}, {"onCauses", {"Evicted"}}}}}},
                  "spec.failurePolicy.rules[0].action: \"Ignore\" is not one of RestartJob, "
                  "RestartJobAndIgnoreBackoffLimit, FailJob"},
        BadPolicy{"NoCauses",
                  {{"rules", {{{"action", "FailJob"}}}}},
                  "spec.failurePolicy.rules[0].onCauses: required: a list of 1 to 7 causes out "
                  "of Evicted, Preempted, NodeLost, Deleted, OperatorRestart, Failed, Stalled"},
        BadPolicy{"UnknownCause",
                  {{"rules", {{{"action", "FailJob"}, {"onCauses", {"Evicted", "OOMKilled"}}}}}},
                  "spec.failurePolicy.rules[0].onCauses[1]: must be one of Evicted, Preempted, "
                  "NodeLost, Deleted, OperatorRestart, Failed, Stalled"},
        BadPolicy{"LongName",
                  {{"rules",
                    {{{"name", std::string(64, 'n')},
                      {"action", "FailJob"},
                      {"onCauses", {"Evicted"}}}}}},
                  "spec.failurePolicy.rules[0].name: must be a string of at most 63 characters"}),
    [](const ::testing::TestParamInfo<BadPolicy>& i) { return std::string(i.param.name); });

TEST(FailurePolicy, TooManyRulesAreRefused) {
  json rules = json::array();
  for (int i = 0; i < 33; ++i) rules.push_back({{"action", "FailJob"}, {"onCauses", {"Failed"}}});
  EXPECT_FALSE(ParseFailurePolicy({{"failurePolicy", {{"rules", rules}}}}).ok());
}

TEST(RestartCounts, AStatusFromBeforeTheFieldCountsEveryRestart) {
  RestartCounts r = RestartCounts::FromJson({{"restartCount", 2}, {"evaluatorRestarts", 1}}, 2);
  EXPECT_EQ(r.backoff_limit_used, 2);
  EXPECT_EQ(r.evaluator_backoff_limit_used, 1);
  EXPECT_TRUE(r.by_cause.empty());
}

TEST(RestartCounts, RoundTripsAndDropsWhatIsMalformed) {
  RestartCounts r;
  r.backoff_limit_used = 1;
  r.by_cause = {{"Evicted", 2}, {"Failed", 1}};
  const json j = r.ToJson(3);
  EXPECT_EQ(j, json::parse(R"({"total":3,"backoffLimitUsed":1,
                               "byCause":{"Evicted":2,"Failed":1}})"));
  RestartCounts back = RestartCounts::FromJson({{"restarts", j}}, 3);
  EXPECT_EQ(back.backoff_limit_used, 1);
  EXPECT_EQ(back.by_cause, r.by_cause);
  RestartCounts bad = RestartCounts::FromJson(
      {{"restarts",
        {{"backoffLimitUsed", -1},
         {"byCause", {{"Evicted", "x"}, {"Bogus", 4}, {"Failed", 1e300}}}}}},
      5);
  EXPECT_EQ(bad.backoff_limit_used, 5);
  EXPECT_TRUE(bad.by_cause.empty());
}

}  // namespace
}  // namespace tj::api
