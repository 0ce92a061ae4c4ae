// Configuration loading: every error case names the file, line and column, suggests a fix,
// and a valid file gives exactly the typed values.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/load.hpp"
#include "config/schema.hpp"
#include "config/toml_writer.hpp"

namespace so = superoffload;
using so::config::ConfigError;
using so::config::ConfigSources;
using so::config::load_config;

namespace {

class ConfigLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("so_config_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path write(const std::string& name, const std::string& text) {
    auto path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }
  // The one-string message of the ConfigError thrown for `sources`.
  std::string error_of(const ConfigSources& sources, int world_size = 1) {
    try {
      load_config(sources, world_size);
    } catch (const ConfigError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected a ConfigError";
    return "";
  }
  std::string error_of_toml(const std::string& text, int world_size = 1) {
    return error_of(ConfigSources{write("c.toml", text), std::nullopt, {}}, world_size);
  }

  static constexpr const char* kRequired = "[model]\npath = \"/m\"\n[data]\npath = \"/d.jsonl\"\n";
  std::filesystem::path dir_;
};

TEST_F(ConfigLoad, MinimalFileGivesDefaultsAndDerivedBatch) {
  auto loaded = load_config({write("c.toml", kRequired), std::nullopt, {}}, 4);
  const so::config::Config defaults;
  EXPECT_EQ(loaded.config.model.path, "/m");
  EXPECT_EQ(loaded.config.zero.sub_group_size, defaults.zero.sub_group_size);
  EXPECT_EQ(loaded.config.offload.cpuadam_cores_perc, defaults.offload.cpuadam_cores_perc);
  EXPECT_EQ(loaded.config.training.train_micro_batch_size_per_gpu, 1);
  EXPECT_EQ(loaded.config.training.gradient_accumulation_steps, 1);
  EXPECT_EQ(loaded.config.training.train_batch_size, 4);
  EXPECT_EQ(loaded.origins.at("model.path"), (dir_ / "c.toml").string() + ":2:8");
  EXPECT_TRUE(loaded.warnings.empty());
}

TEST_F(ConfigLoad, MisspeltKeyNamesFileLineAndSuggestion) {
  const auto message = error_of_toml(std::string(kRequired) + "\n[zero]\nstage = 3\nsub_grup_size = 4e8\n");
  EXPECT_NE(message.find("unknown key 'sub_grup_size' in [zero] at " + (dir_ / "c.toml").string() + ":8:1"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("did you mean 'sub_group_size'?"), std::string::npos) << message;
}

TEST_F(ConfigLoad, KeyInWrongSectionSaysWhereItBelongs) {
  const auto message = error_of_toml(std::string(kRequired) + "[training]\nratio = 0.9\n");
  EXPECT_NE(message.find("unknown key 'ratio' in [training]"), std::string::npos) << message;
  EXPECT_NE(message.find("it belongs in [offload]"), std::string::npos) << message;
}

TEST_F(ConfigLoad, UnknownSectionSuggestsTheNearestOne) {
  const auto message = error_of_toml(std::string(kRequired) + "[zeroo]\nstage = 3\n");
  EXPECT_NE(message.find("unknown section [zeroo]"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean [zero]?"), std::string::npos) << message;
}

TEST_F(ConfigLoad, TopLevelDeepSpeedKeyIsRedirected) {
  const auto message = error_of_toml(std::string("train_batch_size = 8\n") + kRequired);
  EXPECT_NE(message.find("unknown key 'train_batch_size' at the top level"), std::string::npos) << message;
  EXPECT_NE(message.find("it belongs in [training]"), std::string::npos) << message;
}

TEST_F(ConfigLoad, WrongTypeSaysWhatIsExpected) {
  const auto message = error_of_toml(std::string(kRequired) + "[zero]\nsub_group_size = \"big\"\n");
  EXPECT_NE(message.find("[zero] sub_group_size"), std::string::npos) << message;
  EXPECT_NE(message.find(":6:18: expected an integer"), std::string::npos) << message;
}

TEST_F(ConfigLoad, WholeFloatsAreIntegersFractionsAreNot) {
  auto loaded = load_config({write("c.toml", std::string(kRequired) + "[zero]\nsub_group_size = 4e8\n"), {}, {}}, 1);
  EXPECT_EQ(loaded.config.zero.sub_group_size, 400'000'000);
  const auto message = error_of_toml(std::string(kRequired) + "[zero]\nreduce_bucket_size = 1.5\n");
  EXPECT_NE(message.find("expected an integer, got 1.5"), std::string::npos) << message;
}

TEST_F(ConfigLoad, OutOfRangeShowsTheRange) {
  const auto message = error_of_toml(std::string(kRequired) + "[offload]\nratio = 1.5\n");
  EXPECT_NE(message.find("[offload] ratio = 1.5"), std::string::npos) << message;
  EXPECT_NE(message.find("expected a finite number in [0, 1]"), std::string::npos) << message;
}

TEST_F(ConfigLoad, BadChoiceListsTheAllowedValues) {
  const auto message = error_of_toml(std::string(kRequired) + "[lr_schedule]\ntype = \"cosin\"\n");
  EXPECT_NE(message.find("expected one of \"constant\", \"cosine\", \"linear\""), std::string::npos) << message;
  const auto stage = error_of_toml(std::string(kRequired) + "[zero]\nstage = 2\n");
  EXPECT_NE(stage.find("[zero] stage = 2"), std::string::npos) << stage;
}

TEST_F(ConfigLoad, MissingRequiredKeyIsNamedWithTheFix) {
  const auto message = error_of_toml("[model]\npath = \"/m\"\n");
  EXPECT_NE(message.find("missing required key [data] path"), std::string::npos) << message;
  EXPECT_NE(message.find("--set data.path="), std::string::npos) << message;
}

TEST_F(ConfigLoad, InconsistentBatchSizesShowTheArithmetic) {
  const auto message = error_of_toml(std::string(kRequired) +
                                         "[training]\ntrain_batch_size = 32\ntrain_micro_batch_size_per_gpu = 4\n"
                                         "gradient_accumulation_steps = 2\n",
                                     2);
  EXPECT_NE(message.find("train_batch_size = 32 but train_micro_batch_size_per_gpu x gradient_accumulation_steps x "
                         "world size = 4 x 2 x 2 = 16"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("c.toml:6:20"), std::string::npos) << message;
}

TEST_F(ConfigLoad, AllProblemsAreReportedTogether) {
  const auto message = error_of_toml(std::string(kRequired) +
                                     "[zero]\nsub_grup_size = 1\n[offload]\nratio = 2.0\n[zeroo]\nx = 1\n");
  EXPECT_NE(message.find("(3 problems)"), std::string::npos) << message;
}

TEST_F(ConfigLoad, SyntaxErrorNamesLineAndColumn) {
  const auto message = error_of_toml("[model]\npath = \"/m\n");
  EXPECT_NE(message.find((dir_ / "c.toml").string() + ":2:"), std::string::npos) << message;
  EXPECT_NE(message.find("TOML syntax error"), std::string::npos) << message;
}

TEST_F(ConfigLoad, MissingFileIsNamed) {
  const auto message = error_of(ConfigSources{dir_ / "nope.toml", std::nullopt, {}});
  EXPECT_NE(message.find("nope.toml does not exist"), std::string::npos) << message;
}

TEST_F(ConfigLoad, SettingsThisConfigurationDoesNotReadAreWarnedAbout) {
  auto loaded = load_config({write("c.toml", std::string(kRequired) + "[offload]\ndevice = \"none\"\n"), std::nullopt,
                             {"offload.ratio=0.5", "zero.sub_group_size=1000", "lr_schedule.lr_range_test_step_size=5",
                              "metrics.job_name=x", "profile.top_layers=3"}},
                            1);
  std::string all;
  for (const auto& w : loaded.warnings) all += w + "\n";
  for (const char* expected :
       {"[offload] ratio (--set offload.ratio=0.5) has no effect: [offload] device = \"none\" steps the whole "
        "optimizer on the device",
        "[zero] sub_group_size (--set zero.sub_group_size=1000) has no effect",
        "[lr_schedule] lr_range_test_step_size (--set lr_schedule.lr_range_test_step_size=5) has no effect: only "
        "[lr_schedule] type = \"lr_range_test\" reads it",
        "[metrics] job_name (--set metrics.job_name=x) has no effect", "[profile] top_layers (--set profile.top_layers=3) has no effect"}) {
    EXPECT_NE(all.find(expected), std::string::npos) << expected << " in:\n" << all;
  }
  EXPECT_EQ(loaded.warnings.size(), 5u) << all;
  // Read settings give none.
  EXPECT_TRUE(load_config({write("c.toml", kRequired), std::nullopt, {"offload.ratio=0.5"}}, 1).warnings.empty());
}

TEST_F(ConfigLoad, RenamedKeyLoadsUnderItsNewNameWithAWarning) {
  auto loaded = load_config({write("c.toml", std::string(kRequired) + "[training]\nwarmup_steps = 3\n"), std::nullopt,
                             {}},
                            1);
  EXPECT_EQ(loaded.config.training.timing_warmup_steps, 3);
  ASSERT_EQ(loaded.warnings.size(), 1u);
  EXPECT_NE(loaded.warnings[0].find("[training] warmup_steps (" + (dir_ / "c.toml").string() +
                                    ":6:16) is deprecated: it is now timing_warmup_steps"),
            std::string::npos)
      << loaded.warnings[0];
  EXPECT_NE(loaded.warnings[0].find("[lr_schedule] warmup_num_steps"), std::string::npos) << loaded.warnings[0];
  // From --set too; and both names at once is refused.
  auto overridden = load_config({write("c.toml", kRequired), std::nullopt, {"training.warmup_steps=2"}}, 1);
  EXPECT_EQ(overridden.config.training.timing_warmup_steps, 2);
  EXPECT_EQ(overridden.warnings.size(), 1u);
  const auto message = error_of_toml(std::string(kRequired) + "[training]\nwarmup_steps = 3\ntiming_warmup_steps = 1\n");
  EXPECT_NE(message.find("is the old name of timing_warmup_steps, which is set too"), std::string::npos) << message;
}

TEST_F(ConfigLoad, OverridesWinAndAreParsedAsTomlValues) {
  ConfigSources sources{write("c.toml", std::string(kRequired) + "[zero]\nsub_group_size = 100\n"), std::nullopt,
                        {"zero.sub_group_size=4e8", "offload.super_offload=false", "training.output_dir=/scratch/run 1",
                         "optimizer.betas=[0.9, 0.95]"}};
  auto loaded = load_config(sources, 1);
  EXPECT_EQ(loaded.config.zero.sub_group_size, 400'000'000);
  EXPECT_FALSE(loaded.config.offload.super_offload);
  EXPECT_EQ(loaded.config.training.output_dir, "/scratch/run 1");  // not TOML: taken as a string
  EXPECT_EQ(loaded.config.optimizer.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(loaded.origins.at("zero.sub_group_size"), "--set zero.sub_group_size=4e8");
}

TEST_F(ConfigLoad, OverrideErrorsAreExplained) {
  ConfigSources bad_key{write("c.toml", kRequired), std::nullopt, {"zero.sub_grup_size=1"}};
  auto message = error_of(bad_key);
  EXPECT_NE(message.find("unknown key 'sub_grup_size' in [zero] at --set zero.sub_grup_size=1"), std::string::npos)
      << message;
  EXPECT_NE(message.find("did you mean 'sub_group_size'?"), std::string::npos) << message;
  ConfigSources malformed{write("c.toml", kRequired), std::nullopt, {"sub_group_size=1"}};
  message = error_of(malformed);
  EXPECT_NE(message.find("expected section.key=value"), std::string::npos) << message;
}

TEST_F(ConfigLoad, CrossChecks) {
  auto message = error_of_toml(std::string(kRequired) + "[training]\nmax_steps = 0\nepochs = 0\n");
  EXPECT_NE(message.find("max_steps and epochs are both 0"), std::string::npos) << message;
  message = error_of_toml(std::string(kRequired) + "[optimizer]\nlr = 1e-5\n[lr_schedule]\nmin_lr = 1e-3\n");
  EXPECT_NE(message.find("min_lr"), std::string::npos) << message;
  message = error_of_toml(std::string(kRequired) + "[runtime]\ndevice = \"cpu\"\ncomm_backend = \"nccl\"\n");
  EXPECT_NE(message.find("NCCL works on GPU buffers only"), std::string::npos) << message;
}

TEST_F(ConfigLoad, EffectiveTomlLoadsBackToTheSameValues) {
  auto first = load_config({write("c.toml", std::string(kRequired) +
                                                "[offload]\nratio = 0.9\n[optimizer]\nlr = 3e-4\nbetas = [0.9, 0.95]\n"),
                            std::nullopt, {}},
                           2);
  const auto text = so::config::to_toml(first.config, &first.origins);
  auto second = load_config({write("again.toml", text), std::nullopt, {}}, 2);
  EXPECT_EQ(so::config::to_toml(second.config), so::config::to_toml(first.config));
  EXPECT_EQ(second.config.offload.ratio, 0.9);
  EXPECT_EQ(second.config.optimizer.lr, 3e-4);
}


// Validation during training: HF Trainer's names import, and every setting that needs
// validation data, or contradicts another, is refused or warned about by name.
class ConfigEvaluation : public ConfigLoad {
 protected:
  so::config::LoadedConfig load_toml(const std::string& text) {
    return load_config({write("c.toml", std::string(kRequired) + text), std::nullopt, {}}, 1);
  }
  static bool warned(const so::config::LoadedConfig& loaded, const std::string& needle) {
    for (const auto& w : loaded.warnings) {
      if (w.find(needle) != std::string::npos) return true;
    }
    return false;
  }
};

TEST_F(ConfigEvaluation, HfTrainerNamesImport) {
  const auto loaded = load_toml(
      "eval_fraction = 0.1\n[training]\neval_steps = 50\nload_best_model_at_end = true\nper_device_eval_batch_size = 8\n"
      "early_stopping_patience = 3\nmetric_for_best_model = \"eval_loss\"\n");
  EXPECT_EQ(loaded.config.training.eval_every_steps, 50);
  EXPECT_TRUE(loaded.config.checkpoint.keep_best);
  EXPECT_EQ(loaded.config.training.per_device_eval_batch_size, 8);
  EXPECT_EQ(loaded.config.training.early_stopping_patience, 3);
  EXPECT_NE(loaded.origins.at("training.eval_every_steps").find("HF Trainer's eval_steps"), std::string::npos);
  EXPECT_NE(loaded.origins.at("checkpoint.keep_best").find("HF Trainer's load_best_model_at_end"), std::string::npos);
  // "loss" is HF's shorthand for the eval loss; any other metric is not computed here.
  EXPECT_NO_THROW(load_toml("eval_fraction = 0.1\n[training]\nmetric_for_best_model = \"loss\"\n"));
  const auto message = error_of_toml(std::string(kRequired) + "eval_fraction = 0.1\n[training]\nmetric_for_best_model = \"eval_accuracy\"\n");
  EXPECT_NE(message.find("metric_for_best_model"), std::string::npos) << message;
  EXPECT_NE(message.find("\"eval_loss\""), std::string::npos) << message;
}

TEST_F(ConfigEvaluation, AnHfNameAndOursTogetherAreRefused) {
  const auto message =
      error_of_toml(std::string(kRequired) + "eval_fraction = 0.1\n[training]\neval_steps = 5\neval_every_steps = 10\n");
  EXPECT_NE(message.find("[training] eval_steps"), std::string::npos) << message;
  EXPECT_NE(message.find("HF Trainer's name of [training] eval_every_steps, which is set too"), std::string::npos) << message;
  const auto other = error_of_toml(std::string(kRequired) +
                                   "eval_fraction = 0.1\n[training]\nload_best_model_at_end = true\n[checkpoint]\nkeep_best = false\n");
  EXPECT_NE(other.find("[checkpoint] keep_best, which is set too"), std::string::npos) << other;
}

TEST_F(ConfigEvaluation, SettingsThatNeedValidationData) {
  auto message = error_of_toml(std::string(kRequired) + "[training]\neval_every_steps = 10\n");
  EXPECT_NE(message.find("[training] eval_every_steps = 10"), std::string::npos) << message;
  EXPECT_NE(message.find("needs validation data — set [data] eval_path"), std::string::npos) << message;
  message = error_of_toml(std::string(kRequired) + "[training]\nearly_stopping_patience = 2\n");
  EXPECT_NE(message.find("[training] early_stopping_patience = 2"), std::string::npos) << message;
  message = error_of_toml(std::string(kRequired) + "eval_fraction = 0.1\n[training]\nearly_stopping_patience = 2\n");
  EXPECT_NE(message.find("needs evaluations during the run — set [training] eval_every_steps"), std::string::npos) << message;
  // Switches flipped alone still start: they are only warned about.
  const auto loaded = load_toml("[checkpoint]\nkeep_best = true\n[training]\neval_on_start = true\n");
  EXPECT_TRUE(warned(loaded, "[checkpoint] keep_best"));
  EXPECT_TRUE(warned(loaded, "[training] eval_on_start"));
  EXPECT_TRUE(warned(loaded, "there is no validation data"));
}

TEST_F(ConfigEvaluation, WhereTheValidationDataComesFrom) {
  auto message = error_of_toml(std::string(kRequired) + "eval_fraction = 0.6\n");
  EXPECT_NE(message.find("[data] eval_fraction = 0.6"), std::string::npos) << message;
  EXPECT_NE(message.find("[0, 0.5]"), std::string::npos) << message;
  EXPECT_NE(error_of_toml(std::string(kRequired) + "eval_fraction = -0.1\n").find("eval_fraction"), std::string::npos);
  message = error_of_toml(std::string(kRequired) + "eval_fraction = 0.1\neval_path = \"/e.jsonl\"\n");
  EXPECT_NE(message.find("are both set"), std::string::npos) << message;
  const auto same = load_toml("eval_path = \"/d.jsonl\"\n");
  EXPECT_TRUE(warned(same, "is the training data /d.jsonl")) << same.warnings.size();
}

}  // namespace
