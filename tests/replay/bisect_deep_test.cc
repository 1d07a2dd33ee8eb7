// bisect's deep step without a GPU: BisectOptions::detrace_exe points at a fake `detrace` (a shell
// script) that logs how it was asked to record and copies in a synthetic run prepared under the
// same name (deep_synth.h's toy layer: digest-level runs, and deep runs of launches 1-4). The
// digest diff finds the second GEMM propagated after the first; the deep step must ask for
// --deep ops:0:1 and name the planted racy reduction.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "detrace/replay/bisect.h"

#include "../db/test_util.h"
#include "deep_synth.h"

namespace detrace::replay {
namespace {

using testing::TempDir;

class BisectDeepStep : public ::testing::Test {
 protected:
  void SetUp() override { prepare(testing::deep::toyLayer(), 1, 5, "ops:0:1"); }

  // The runs the fake recorder hands out: `program` at digest level, and deep over launches
  // [from, to) with `window` as its deep_window.
  void prepare(const testing::deep::Program& program, int64_t from, int64_t to,
               const std::string& window) {
    testing::Rng rng;
    uint64_t seed = rng.u64();
    for (const char* name : {"digest-a", "digest-b", "deep-a", "deep-b"}) {
      bool deep = std::string(name).starts_with("deep");
      testing::deep::RunSpec spec{std::string(name).ends_with("-b"),
                                  deep ? from : 0,
                                  deep ? to : 0,
                                  deep ? window : "",
                                  seed,
                                  {}};
      ASSERT_TRUE(testing::deep::writeRun(tmp_.file("prepared/") + name, program, spec).isOk());
    }
    std::ofstream(fake()) << "#!/bin/sh\n"
                          << "echo \"$*\" >> " << log() << "\n"
                          << "rm -rf \"$3\" && cp -r " << tmp_.file("prepared")
                          << "/$(basename \"$3\") \"$3\"\n";
    chmod(fake().c_str(), 0755);
  }

  std::string fake() const { return tmp_.file("fake-detrace"); }
  std::string log() const { return tmp_.file("record.log"); }
  std::string recorded() const {
    std::ifstream in(log());
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  BisectResult bisectWith(BisectOptions o) {
    o.command_a = o.command_a.empty() ? std::vector<std::string>{"python", "toy.py"} : o.command_a;
    o.workdir = tmp_.file("work");
    o.detrace_exe = fake();
    auto r = bisect(o);
    EXPECT_TRUE(r.isOk()) << r.status().message();
    return r.isOk() ? std::move(*r) : BisectResult{};
  }

  TempDir tmp_;
};

TEST_F(BisectDeepStep, RecordsTheStretchInDeepModeAndNamesTheKernel) {
  BisectResult r = bisectWith({});
  EXPECT_TRUE(r.diverged);
  EXPECT_EQ(r.classification, "propagated");
  ASSERT_TRUE(r.deep.has_value());
  EXPECT_EQ(r.deep->window, "ops:0:1");
  EXPECT_EQ(r.deep->skipped, "");
  EXPECT_NE(recorded().find("record -o " + tmp_.file("work/deep-a") +
                            " --force --capture digest --deep ops:0:1 -- python toy.py"),
            std::string::npos)
      << recorded();
  ASSERT_TRUE(r.deep->diff.has_value());
  ASSERT_TRUE(r.deep->diff->origin.has_value());
  EXPECT_EQ(r.deep->diff->origin->kernel, "planted_racy_reduce");
  EXPECT_NE(
      r.verdict.find(
          "divergence begins at kernel `planted_racy_reduce` (event 7 in deep-a / 7 in deep-b"),
      std::string::npos)
      << r.verdict;
  nlohmann::json j = bisectJson(r);
  EXPECT_EQ(j["origin_kernel"], "planted_racy_reduce");
  EXPECT_EQ(j["origin_args"], nlohmann::json::array({"arg2"}));
  EXPECT_EQ(j["origin_window_index"], 2);
  EXPECT_EQ(j["deep"]["window"], "ops:0:1");
  EXPECT_NE(formatBisect(r).find("diff (deep)"), std::string::npos) << formatBisect(r);
}

// Divergence entering before the first library op: an ops window cannot start there, so the
// step counts the launches before the op instead.
TEST_F(BisectDeepStep, DivergenceBeforeTheFirstOpGetsALaunchesWindow) {
  using testing::deep::Param;
  testing::deep::Program p;
  p.allocs = {1 << 20, 4096, 4096, 4096};
  p.launches = {
      {"init_racy_kernel", {Param{1, "arg0", true}}, false, true, ""},
      {"scale_kernel", {Param{1, "arg0", false}, Param{2, "arg1", true}}, false, false, ""},
      {"sm90_gemm_kernel",
       {Param{0, "arg0", false}, Param{2, "arg1", false}, Param{3, "arg2", true}},
       true,
       false,
       ""},
  };
  prepare(p, 0, 2, "launches:0:2");
  BisectResult r = bisectWith({});
  ASSERT_TRUE(r.deep.has_value());
  EXPECT_EQ(r.deep->window, "launches:0:2");
  EXPECT_NE(recorded().find("--deep launches:0:2"), std::string::npos) << recorded();
  ASSERT_TRUE(r.deep->diff && r.deep->diff->origin);
  EXPECT_EQ(r.deep->diff->origin->kernel, "init_racy_kernel");
}

TEST_F(BisectDeepStep, NoDeepSkipsTheStepAndSaysSo) {
  BisectOptions o;
  o.deep = false;
  BisectResult r = bisectWith(o);
  ASSERT_TRUE(r.deep.has_value());
  EXPECT_EQ(r.deep->skipped, "skipped (--no-deep)");
  EXPECT_EQ(recorded().find("--deep"), std::string::npos) << recorded();
  EXPECT_NE(r.verdict.find("Deep window: skipped (--no-deep)."), std::string::npos) << r.verdict;
  EXPECT_FALSE(bisectJson(r).contains("origin_kernel"));
}

TEST_F(BisectDeepStep, APairOfCommandsSkipsTheStepAndSaysWhy) {
  BisectOptions o;
  o.command_b = {"python", "toy.py", "--batch", "64"};
  BisectResult r = bisectWith(o);
  ASSERT_TRUE(r.deep.has_value());
  EXPECT_NE(r.deep->skipped.find("run to run"), std::string::npos) << r.deep->skipped;
  EXPECT_EQ(recorded().find("--deep"), std::string::npos) << recorded();
}

}  // namespace
}  // namespace detrace::replay
