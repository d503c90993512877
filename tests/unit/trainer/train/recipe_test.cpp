// The recipe flags of a declared model (--optimizer, --momentum, --nesterov, --weight-decay,
// --lr-schedule, --label-smoothing): each bad value refused naming the flag, its value and
// what to do; the built-in model refusing any but the defaults; and the backup fingerprint,
// which gains a field only where the recipe differs from the defaults.
#include "trainer/train/recipe.h"

#include <gtest/gtest.h>

#include "trainer/train/fingerprint.h"

namespace tj::train {
namespace {

RecipeOptions Sgd(double momentum, bool nesterov = false) {
  RecipeOptions r;
  r.optimizer = OptimizerKind::kSgd;
  r.momentum = momentum;
  r.nesterov = nesterov;
  return r;
}

bool Says(const std::string& message, const std::string& part) {
  return message.find(part) != std::string::npos;
}

TEST(RecipeFlags, TheDefaultsAndAFullSgdRecipeAreAccepted) {
  EXPECT_EQ(RecipeFlagsError({}, true), "");
  EXPECT_EQ(RecipeFlagsError({}, false), "");
  RecipeOptions r = Sgd(0.9, true);
  r.weight_decay = 5e-4;
  r.lr_schedule = "cosine:0.1,warmup=10,alpha=0.01";
  r.label_smoothing = 0.1;
  EXPECT_EQ(RecipeFlagsError(r, true), "");
  RecipeOptions adam;
  adam.weight_decay = 1e-2;  // AdamW
  adam.lr_schedule = "step:1e-3@1,1e-4@3";
  EXPECT_EQ(RecipeFlagsError(adam, true), "");
}

TEST(RecipeFlags, EachBadValueIsRefusedNamingTheFlagTheValueAndWhatToDo) {
  struct Case {
    RecipeOptions recipe;
    std::vector<std::string> says;
  };
  RecipeOptions decay, smoothing, schedule, adam_momentum, adam_nesterov;
  decay.weight_decay = -1;
  smoothing.label_smoothing = 1;
  schedule.lr_schedule = "cosine:fast";
  adam_momentum.momentum = 0.9;
  adam_nesterov.nesterov = true;
  const std::vector<Case> cases = {
      {Sgd(1.0), {"--momentum 1", "[0, 1)"}},
      {Sgd(-0.5), {"--momentum -0.5", "[0, 1)"}},
      {Sgd(0.0, true), {"--nesterov", "--momentum above 0"}},
      {adam_momentum, {"--momentum 0.9", "--optimizer sgd"}},
      {adam_nesterov, {"--nesterov", "--optimizer sgd"}},
      {decay, {"--weight-decay -1", ">= 0"}},
      {smoothing, {"--label-smoothing 1", "[0, 1)"}},
      {schedule, {"--lr-schedule", "cosine:fast", "cosine:LR"}},
  };
  for (const Case& c : cases) {
    const std::string e = RecipeFlagsError(c.recipe, true);
    for (const std::string& part : c.says) EXPECT_TRUE(Says(e, part)) << part << " in: " << e;
  }
}

TEST(RecipeFlags, TheBuiltInModelRefusesAnyButTheDefaultsNamingTheFlag) {
  RecipeOptions schedule, smoothing, decay;
  schedule.lr_schedule = "constant:0.01";
  smoothing.label_smoothing = 0.1;
  decay.weight_decay = 1e-4;
  for (const auto& [recipe, flag] :
       std::vector<std::pair<RecipeOptions, std::string>>{{Sgd(0.0), "--optimizer"},
                                                          {schedule, "--lr-schedule"},
                                                          {smoothing, "--label-smoothing"},
                                                          {decay, "--weight-decay"}}) {
    const std::string e = RecipeFlagsError(recipe, false);
    EXPECT_TRUE(Says(e, flag + " applies to declared models only")) << e;
  }
}

TEST(RecipeFingerprint, TheDefaultsAddNothingAndEachChangeItsField) {
  EXPECT_EQ(RecipeFingerprint({}), nlohmann::json::object());
  RecipeOptions r = Sgd(0.9, true);
  r.weight_decay = 5e-4;
  r.lr_schedule = "cosine:0.1";
  r.label_smoothing = 0.1;
  const nlohmann::json f = RecipeFingerprint(r);
  EXPECT_EQ(f["optimizer"], "sgd");
  EXPECT_EQ(f["momentum"], 0.9);
  EXPECT_EQ(f["nesterov"], true);
  EXPECT_EQ(f["weight_decay"], 5e-4);
  EXPECT_EQ(f["lr_schedule"], "cosine:0.10000000000000001,warmup=0,alpha=0");
  EXPECT_EQ(f["label_smoothing"], 0.1);
  // A resume with another momentum is refused naming the field.
  RecipeOptions other = r;
  other.momentum = 0.8;
  const auto refusal = ResumeRefusal(RecipeFingerprint(other), f);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_TRUE(Says(*refusal, "momentum")) << *refusal;
  EXPECT_FALSE(ResumeRefusal(RecipeFingerprint(r), f).has_value());
}

TEST(RecipeFingerprint, ASchedulesFingerprintIsItsNormalisedText) {
  RecipeOptions a, b;
  a.lr_schedule = "constant:0.1";
  b.lr_schedule = "constant:1e-1";
  EXPECT_EQ(RecipeFingerprint(a), RecipeFingerprint(b));
  RecipeOptions seeds;
  seeds.lr_schedule = "seeds";
  EXPECT_EQ(RecipeFingerprint(seeds), nlohmann::json::object());
}

}  // namespace
}  // namespace tj::train
