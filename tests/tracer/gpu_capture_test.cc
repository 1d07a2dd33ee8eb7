// Records tests/tracer/tracer_gpu_app with the capture options and checks the trace against what
// the program did: NVTX ranges as markers in launch order, `--capture full` copies that equal the
// program's matrices (A and B are exact patterns; D = A * B is exact in fp32, so the test computes
// it), fingerprints that equal the CPU twin's digest of the copied bytes, `--capture-range`, and
// `--window steps:1:2`.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <map>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "../db/test_util.h"
#include "common/gpu_test.h"
#include "detrace/db/reader.h"
#include "detrace/db/run.h"
#include "detrace/kernels/digest.h"
#include "common/shell.h"
#include "lt_epilogue_values.h"

namespace detrace {
namespace {

constexpr int kM = 256, kN = 128, kK = 64;

int shell(const std::string& cmd, std::string& out) {
  testing::ShellOutput o = testing::runShell(cmd);
  out += o.out;
  return o.status;
}

struct Recorded {
  std::unique_ptr<db::TraceReader> reader;
  std::vector<db::Event> events;
};

// Records the app (with `app_args`, e.g. " lt-epilogue") with `options` and loads every event of
// its one rank.
void recordApp(const std::string& dir, const std::string& options, Recorded& out,
               const std::string& app_args = "") {
  std::string log;
  int rc = shell(fmt::format("timeout -k 5 120 {0}/replay/detrace record -o {1} {2} -- {0}/tests/tracer_gpu_app{3}",
                             DETRACE_BINARY_DIR, dir, options, app_args),
                 log);
  ASSERT_EQ(rc, 0) << log;
  auto run = db::Run::open(dir);
  ASSERT_TRUE(run.isOk()) << run.status().message();
  auto reader = run->openRank(run->ranks()[0].rank);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  out.reader = std::move(*reader);
  auto cursor = out.reader->events();
  ASSERT_TRUE(cursor.isOk());
  for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
    out.events.push_back(cursor->event());
  }
}

std::vector<float> pattern(int n, int mod, float scale, float offset) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i % mod) * scale + offset;
  return v;
}

// D = A * B, column-major, exact for these patterns.
std::vector<float> product(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(kM * kN);
  for (int j = 0; j < kN; ++j) {
    for (int i = 0; i < kM; ++i) {
      double s = 0;
      for (int p = 0; p < kK; ++p) s += double(a[i + p * kM]) * double(b[p + j * kK]);
      d[i + j * kM] = static_cast<float>(s);
    }
  }
  return d;
}

// The operand's digest computed on the CPU from bytes (the definition in docs/digest.md).
uint64_t cpuDigest(const db::Operand& o, const std::vector<uint8_t>& bytes, std::vector<uint64_t>& rows) {
  if (o.rows <= 0) return kernels::digestCpu(bytes.data(), bytes.size());
  rows.resize(o.rows);
  kernels::digestRowsCpu(bytes.data(), static_cast<uint32_t>(o.rows), o.row_bytes, o.row_stride, rows.data());
  return XXH64(rows.data(), rows.size() * sizeof(uint64_t), static_cast<uint64_t>(o.rows));
}

std::vector<uint8_t> bytesOf(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The operands of each of the app's two GEMMs, in call order.
std::vector<std::vector<db::Operand>> gemmOperands(const Recorded& r) {
  std::vector<std::vector<db::Operand>> out;
  auto gemms = r.reader->gemms();
  EXPECT_TRUE(gemms.isOk());
  if (!gemms.isOk()) return out;
  EXPECT_EQ(gemms->size(), 2u);
  for (const auto& [seq, g] : *gemms) {
    auto ops = r.reader->operands(seq);
    EXPECT_TRUE(ops.isOk()) << "operands of GEMM " << seq;
    if (ops.isOk()) out.push_back(std::move(*ops));
  }
  return out;
}

std::vector<std::string> markerNames(const Recorded& r, db::MarkerKind kind) {
  std::vector<std::string> names;
  for (const db::Event& e : r.events) {
    if (e.kind != db::EventKind::kMarker) continue;
    auto m = r.reader->marker(e.seq);
    if (m.isOk() && *m && (*m)->marker_kind == kind) names.push_back(r.reader->str(e.name));
  }
  return names;
}

TEST(TracerCapture, NvtxRangesAndFullCopiesMatchTheProgram) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  Recorded r;
  ASSERT_NO_FATAL_FAILURE(recordApp(tmp.file("run"), "--capture full --capture-ops gemm", r));

  // NVTX: the ranges in push order, and the GEMMs inside "step 1" > "layer 0".
  EXPECT_EQ(markerNames(r, db::MarkerKind::kRangeStart),
            (std::vector<std::string>{"step 0", "step 1", "layer 0", "step 2"}));
  std::vector<std::string> stack;
  int gemms_in_layer = 0;
  for (const db::Event& e : r.events) {
    if (e.kind == db::EventKind::kMarker) {
      auto m = r.reader->marker(e.seq);
      ASSERT_TRUE(m.isOk() && *m);
      if ((*m)->marker_kind == db::MarkerKind::kRangeStart) stack.push_back(r.reader->str(e.name));
      if ((*m)->marker_kind == db::MarkerKind::kRangeEnd && !stack.empty()) stack.pop_back();
    } else if (e.kind == db::EventKind::kGemm) {
      EXPECT_EQ(stack, (std::vector<std::string>{"step 1", "layer 0"}));
      ++gemms_in_layer;
    }
  }
  EXPECT_EQ(gemms_in_layer, 2);

  // Full capture: A, B and D of both GEMMs copied; bytes equal to the program's; digests equal to
  // the CPU twin's digest of the copies.
  auto a = pattern(kM * kK, 97, 0.25f, 0.0f), b = pattern(kK * kN, 89, 0.5f, -3.0f);
  std::map<std::string, std::vector<uint8_t>> expected = {
      {"A", bytesOf(a)}, {"B", bytesOf(b)}, {"D", bytesOf(product(a, b))}};
  const auto gemms = gemmOperands(r);
  ASSERT_EQ(gemms.size(), 2u);
  for (const std::vector<db::Operand>& ops : gemms) {
    std::map<std::string, int> seen;
    for (const db::Operand& o : ops) {
      std::string name = r.reader->str(o.name);
      if (!expected.count(name)) continue;
      ++seen[name];
      ASSERT_GT(o.capture_bytes, 0) << name << " of GEMM " << o.seq << " was not copied";
      auto bytes = r.reader->captureBytes(o.id);
      ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
      EXPECT_EQ(*bytes, expected[name]) << name << " of GEMM " << o.seq;
      std::vector<uint64_t> rows;
      EXPECT_EQ(cpuDigest(o, *bytes, rows), o.digest) << name << ": GPU digest != CPU twin";
      if (o.rows > 0) {
        EXPECT_EQ(rows, o.row_digests);
      }
    }
    EXPECT_EQ(seen["A"], 1);
    EXPECT_EQ(seen["B"], 1);
    EXPECT_GE(seen["D"], 1);
  }
  auto stats = r.reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_GE((*stats)["captures_written"], 6);
  EXPECT_EQ((*stats)["captures_skipped_budget"], 0);
  // The copies were the tracer's: the program copies nothing back, so the trace holds no copy, and
  // the copies' records (and those of the tracer's memsets) were dropped as its own.
  int copies = 0;
  std::string which;  // on failure: whose copies they look like
  for (const db::Event& e : r.events) {
    if (e.kind != db::EventKind::kMemcpy) continue;
    if (++copies <= 8) {
      which += fmt::format("  seq {} {} stream {} correlation {}\n", e.seq, r.reader->str(e.name),
                           e.stream, e.correlation_id);
    }
  }
  EXPECT_EQ(copies, 0) << "the tracer's copies were recorded as the program's:\n" << which;
  EXPECT_GE((*stats)["tracer_own_records_dropped"], (*stats)["captures_written"]);
}

// --row-digests tokens: A (whose stored columns run along k, not the tokens) gets its whole digest
// alone, the CPU twin's digest of its copied bytes; B and D keep their rows, equal to the twin's.
TEST(TracerCapture, TokenRowDigestsLeaveAWhole) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  Recorded r;
  ASSERT_NO_FATAL_FAILURE(
      recordApp(tmp.file("run"), "--capture full --capture-ops gemm --row-digests tokens", r));
  EXPECT_EQ(r.reader->metaValue("row_digests"), "tokens");
  const auto gemms = gemmOperands(r);
  ASSERT_EQ(gemms.size(), 2u);
  for (const std::vector<db::Operand>& ops : gemms) {
    std::map<std::string, int> seen;
    for (const db::Operand& o : ops) {
      const std::string name = r.reader->str(o.name);
      ++seen[name];
      ASSERT_TRUE(o.has_digest) << name;
      ASSERT_GT(o.capture_bytes, 0) << name << " of GEMM " << o.seq << " was not copied";
      auto bytes = r.reader->captureBytes(o.id);
      ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
      std::vector<uint64_t> rows;
      EXPECT_EQ(cpuDigest(o, *bytes, rows), o.digest) << name << ": GPU digest != CPU twin";
      if (name == "A") {
        EXPECT_EQ(o.rows, 0) << "A: whole digest only";
        EXPECT_TRUE(o.row_digests.empty());
        EXPECT_EQ(o.digest, kernels::digestCpu(bytes->data(), bytes->size()));
      } else {
        EXPECT_GT(o.rows, 0) << name << ": token rows kept";
        EXPECT_EQ(rows, o.row_digests) << name;
      }
    }
    EXPECT_EQ(seen["A"], 1);
    EXPECT_EQ(seen["B"], 1);
    EXPECT_GE(seen["D"], 1);
  }
}

TEST(TracerCapture, CaptureRangeCopiesOnlyTheChosenOps) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  Recorded r;
  ASSERT_NO_FATAL_FAILURE(recordApp(tmp.file("run"), "--capture full --capture-range 1:2", r));
  auto gemms = r.reader->gemms();
  ASSERT_TRUE(gemms.isOk());
  ASSERT_EQ(gemms->size(), 2u);
  for (size_t i = 0; i < gemms->size(); ++i) {
    auto ops = r.reader->operands((*gemms)[i].first);
    ASSERT_TRUE(ops.isOk());
    ASSERT_FALSE(ops->empty());
    for (const db::Operand& o : *ops) {
      EXPECT_TRUE(o.has_digest);
      EXPECT_EQ(o.capture_bytes > 0, i == 1) << "library op " << i;
    }
  }
}

TEST(TracerCapture, StepWindowRecordsOnlyThatStep) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  Recorded r;
  ASSERT_NO_FATAL_FAILURE(recordApp(tmp.file("run"), "--window steps:1:2", r));
  int gemms = 0, kernels_outside = 0;
  for (const db::Event& e : r.events) {
    if (e.kind == db::EventKind::kGemm) ++gemms;
    if (e.kind == db::EventKind::kKernel) {
      std::string name = r.reader->str(e.name);
      for (const char* out : {"scale_kernel", "add_one_kernel", "graph_first", "graph_second", "fill_kernel"}) {
        if (name.find(out) != std::string::npos) ++kernels_outside;
      }
    }
  }
  EXPECT_EQ(gemms, 2);
  EXPECT_EQ(kernels_outside, 0) << "kernels outside step 1 were recorded";
  EXPECT_EQ(markerNames(r, db::MarkerKind::kRangeStart), (std::vector<std::string>{"step 1", "layer 0"}));
  EXPECT_EQ(r.reader->metaValue("window"), "steps:1:2");
}

// cuBLASLt matmuls with epilogues (tracer_gpu_app lt-epilogue, lt_epilogue_values.h): each is
// recorded with its epilogue; the bias that BIAS and GELU_AUX_BIAS read is an input operand whose
// copy is the program's bias and whose digest is the CPU twin's; the GeLU input that GELU_AUX_BIAS
// writes (aux) is an output with a row per token; the last call, at the default epilogue, has
// neither. Every operand's digest (and row digests) equal the CPU twin's of the tracer's copy.
TEST(TracerCapture, CublasLtEpiloguesAndTheirOperandsAreRecorded) {
  DETRACE_REQUIRE_GPU();
  namespace v = lt_epilogue_values;
  testing::TempDir tmp;
  Recorded r;
  ASSERT_NO_FATAL_FAILURE(recordApp(tmp.file("run"), "--capture full --capture-ops gemm", r, " lt-epilogue"));
  auto gemms = r.reader->gemms();
  ASSERT_TRUE(gemms.isOk());
  ASSERT_EQ(gemms->size(), std::size(v::kEpilogues));
  std::vector<uint8_t> bias_bytes(v::kM * 2);
  for (int i = 0; i < v::kM; ++i) {
    const uint16_t b = v::biasValue(i);
    std::memcpy(bias_bytes.data() + 2 * i, &b, 2);
  }
  for (size_t call = 0; call < gemms->size(); ++call) {
    const auto& [seq, g] = (*gemms)[call];
    SCOPED_TRACE(fmt::format("call {} ({})", call, db::epilogueText(g.epilogue)));
    EXPECT_EQ(g.epilogue, v::kEpilogues[call]);
    EXPECT_EQ((std::array<int64_t, 3>{g.m, g.n, g.k}), (std::array<int64_t, 3>{v::kM, v::kN, v::kK}));
    auto ops = r.reader->operands(seq);
    ASSERT_TRUE(ops.isOk());
    std::map<std::string, db::Operand> by_name;
    for (const db::Operand& o : *ops) {
      const std::string name = r.reader->str(o.name);
      by_name[name] = o;
      ASSERT_TRUE(o.has_digest) << name;
      auto bytes = r.reader->captureBytes(o.id);
      ASSERT_TRUE(bytes.isOk() && !bytes->empty()) << name << " not copied";
      std::vector<uint64_t> rows;
      EXPECT_EQ(cpuDigest(o, *bytes, rows), o.digest) << name << ": GPU digest != CPU twin";
      if (o.rows > 0) {
        EXPECT_EQ(rows, o.row_digests) << name;
      }
      if (name == "bias") {
        EXPECT_EQ(*bytes, bias_bytes) << "the bias copied is not the program's";
      }
    }
    const bool has_bias = call < v::kWithBias, has_aux = call == v::kWithAux;
    ASSERT_EQ(by_name.count("bias"), has_bias ? 1u : 0u);
    ASSERT_EQ(by_name.count("aux"), has_aux ? 1u : 0u);
    if (has_bias) {
      EXPECT_EQ(by_name["bias"].slot, 4);
      EXPECT_EQ(by_name["bias"].role, db::OperandRole::kInput);
      EXPECT_EQ(by_name["bias"].bytes, v::kM * 2);
    }
    if (has_aux) {
      const db::Operand& aux = by_name["aux"];
      EXPECT_EQ(aux.slot, 5);
      EXPECT_EQ(aux.role, db::OperandRole::kOutput);
      EXPECT_EQ((std::array<int64_t, 3>{aux.rows, aux.row_bytes, aux.row_stride}),
                (std::array<int64_t, 3>{v::kN, v::kM * 2, v::kM * 2}))
          << "a row per token";
    }
  }
}

}  // namespace
}  // namespace detrace
