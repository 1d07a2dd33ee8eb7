// The operands a cuBLASLt descriptor adds to a recorded GEMM (its epilogue's bias and aux, its FP8
// scales and amax outputs), read by the real interposer from the fake cuBLASLt's descriptors.
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "common/shell.h"
#include "detrace/db/reader.h"

namespace detrace {
namespace {

using testing::TempDir;

// One operand as DETRACE_DIAG_GEMM_OPERANDS=1 logs it ("gemm operand: token T slot S NAME role R
// dtype D address 0xA bytes B rows R row_bytes RB row_stride RS").
struct Planned {
  unsigned long long token = 0;
  int slot = -1;
  std::string name;
  int role = 0;  // db::OperandRole
  std::string dtype;
  unsigned long long address = 0, bytes = 0;
  long long rows = 0, row_bytes = 0, row_stride = 0;
};

// The planned operands of each GEMM, in the order of the GEMMs' first lines.
std::vector<std::vector<Planned>> plannedGemms(const std::string& out) {
  std::vector<std::vector<Planned>> gemms;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t at = line.find("gemm operand: ");
    if (at == std::string::npos) continue;
    Planned p;
    char name[64] = {}, dtype[64] = {};
    const int n = std::sscanf(line.c_str() + at,
                              "gemm operand: token %llu slot %d %63s role %d dtype %63s address "
                              "%llx bytes %llu rows %lld row_bytes %lld row_stride %lld",
                              &p.token, &p.slot, name, &p.role, dtype, &p.address, &p.bytes,
                              &p.rows, &p.row_bytes, &p.row_stride);
    if (n != 10) continue;
    p.name = name;
    p.dtype = dtype;
    if (gemms.empty() || gemms.back().front().token != p.token) gemms.emplace_back();
    gemms.back().push_back(p);
  }
  return gemms;
}

// The app's buffers by name ("cublas_epilogue_app: buffer NAME 0xADDRESS").
std::map<std::string, unsigned long long> buffers(const std::string& out) {
  std::map<std::string, unsigned long long> found;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    char name[64] = {};
    unsigned long long address = 0;
    if (std::sscanf(line.c_str(), "cublas_epilogue_app: buffer %63s %llx", name, &address) == 2) {
      found[name] = address;
    }
  }
  return found;
}

std::vector<std::string> names(const std::vector<Planned>& ops) {
  std::vector<std::string> out;
  for (const Planned& p : ops) out.push_back(p.name);
  return out;
}

const Planned& named(const std::vector<Planned>& ops, const std::string& name) {
  static const Planned none;
  for (const Planned& p : ops) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no operand " << name;
  return none;
}

// tests/tracer/cublas_epilogue_app.cc lists the calls (A^T B: m 64, n 8, k 32, D bf16, beta 0).
// The fake driver takes no digests, so the trace holds no operand rows: the operands are checked
// as the GEMM wrapper plans them (DETRACE_DIAG_GEMM_OPERANDS=1), after the descriptor was read
// back through the fake cuBLASLt, with fingerprints on as in
// RecordSeam.GemmsWithTheDriverLoadedButNoContextAskNothingOfTheirStreams.
TEST(RecordSeam, CublasLtEpilogueAndScaleOperandsArePlannedAfterD) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  const std::string bin = DETRACE_BINARY_DIR;
  testing::ShellOutput o = testing::runShell(fmt::format(
      "DETRACE_DIAG_FINGERPRINTS_WITHOUT_CUPTI=1 DETRACE_DIAG_GEMM_OPERANDS=1 {} record -o {} -- "
      "/bin/sh -c 'LD_PRELOAD=\"$LD_PRELOAD {}/tests/libcuda_uninit_fake.so\" exec "
      "{}/tests/cublas_epilogue_app'",
      testing::detraceExe(), run, bin, bin));
  ASSERT_EQ(o.status, 0) << o.out;
  auto reader = testing::openOnlyRank(run);
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
  auto recorded = (*reader)->gemms();
  ASSERT_TRUE(recorded.isOk());
  EXPECT_EQ(recorded->size(), 6u) << o.out;
  const auto buf = buffers(o.out);
  ASSERT_EQ(buf.size(), 8u) << o.out;
  const auto g = plannedGemms(o.out);
  ASSERT_EQ(g.size(), 6u) << o.out;
  for (size_t k = 0; k < g.size(); ++k) {
    const auto& ops = g[k];
    for (size_t i = 1; i < ops.size(); ++i) EXPECT_LT(ops[i - 1].slot, ops[i].slot) << "slot order";
    EXPECT_EQ(named(ops, "A").slot, 0);
    EXPECT_EQ(named(ops, "D").slot, 3);
    EXPECT_EQ(named(ops, "D").bytes, (k == 4 ? 2u : 1u) * 64 * 8 * 2) << "call " << k + 1;
  }
  // 1. GELU_AUX_BIAS: the bias read (64 bf16), the GELU input written (ld 72, a row per token).
  ASSERT_EQ(names(g[0]), (std::vector<std::string>{"A", "B", "D", "bias", "aux"})) << o.out;
  const Planned& bias = named(g[0], "bias");
  EXPECT_EQ(bias.slot, 4);
  EXPECT_EQ(bias.role, 1);
  EXPECT_EQ(bias.dtype, "bf16");
  EXPECT_EQ(bias.address, buf.at("bias"));
  EXPECT_EQ(bias.bytes, 64u * 2);
  EXPECT_EQ(bias.rows, 0);
  const Planned& aux = named(g[0], "aux");
  EXPECT_EQ(aux.slot, 5);
  EXPECT_EQ(aux.role, 2);
  EXPECT_EQ(aux.dtype, "bf16");
  EXPECT_EQ(aux.address, buf.at("aux"));
  EXPECT_EQ(aux.bytes, (7u * 72 + 64) * 2);
  EXPECT_EQ((std::vector<long long>{aux.rows, aux.row_bytes, aux.row_stride}),
            (std::vector<long long>{8, 128, 144}));
  // 2. DRELU_BGRAD: the ReLU mask read (ld 128 bits: 8 bytes a column, 16 apart), the bias
  //    gradient written.
  ASSERT_EQ(names(g[1]), (std::vector<std::string>{"A", "B", "D", "bias", "aux"})) << o.out;
  EXPECT_EQ(named(g[1], "bias").role, 2);
  EXPECT_EQ(named(g[1], "bias").bytes, 64u * 2);
  const Planned& mask = named(g[1], "aux");
  EXPECT_EQ(mask.role, 1);
  EXPECT_EQ(mask.dtype, "u8");
  EXPECT_EQ(mask.bytes, 7u * 16 + 8);
  EXPECT_EQ((std::vector<long long>{mask.rows, mask.row_bytes, mask.row_stride}),
            (std::vector<long long>{8, 8, 16}));
  // 3. BGRADB: a gradient of D's columns, n = 8.
  ASSERT_EQ(names(g[2]), (std::vector<std::string>{"A", "B", "D", "bias"})) << o.out;
  EXPECT_EQ(named(g[2], "bias").role, 2);
  EXPECT_EQ(named(g[2], "bias").bytes, 8u * 2);
  // 4. e4m3 A and B: their scales read, D's amax written, one float each; the bias of D's type.
  ASSERT_EQ(names(g[3]), (std::vector<std::string>{"A", "B", "D", "bias", "A_scale", "B_scale",
                                                   "D_amax"}))
      << o.out;
  EXPECT_EQ(named(g[3], "A").dtype, "f8e4m3");
  EXPECT_EQ(named(g[3], "bias").dtype, "bf16");
  for (const char* scale : {"A_scale", "B_scale", "D_amax"}) {
    const Planned& p = named(g[3], scale);
    EXPECT_EQ(p.role, std::string(scale) == "D_amax" ? 2 : 1) << scale;
    EXPECT_EQ(p.dtype, "f32") << scale;
    EXPECT_EQ(p.bytes, 4u) << scale;
    EXPECT_EQ(p.address, buf.at(scale)) << scale;
  }
  EXPECT_EQ(named(g[3], "A_scale").slot, 6);
  EXPECT_EQ(named(g[3], "D_amax").slot, 10);
  // 5. Batch 2, BIAS_BATCH_STRIDE 64: a vector per batch.
  ASSERT_EQ(names(g[4]), (std::vector<std::string>{"A", "B", "D", "bias"})) << o.out;
  EXPECT_EQ(named(g[4], "bias").bytes, (64u + 64) * 2);
  // 6. No epilogue operand and no FP8 matrix: the pointers left set are not read.
  EXPECT_EQ(names(g[5]), (std::vector<std::string>{"A", "B", "D"})) << o.out;
}

// A batched call whose A's layout counts one batch where D's counts two is invalid (cuBLASLt
// refuses it), yet its inputs may be digested before it: A, whose extent would be taken for two
// matrices, is not planned; B and D, whose layouts agree, are.
TEST(RecordSeam, ACublasLtInputOfAnotherBatchCountIsNotRead) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  const std::string bin = DETRACE_BINARY_DIR;
  testing::ShellOutput o = testing::runShell(fmt::format(
      "CUBLAS_EPILOGUE_APP_BATCH_MISMATCH=1 DETRACE_DIAG_FINGERPRINTS_WITHOUT_CUPTI=1 "
      "DETRACE_DIAG_GEMM_OPERANDS=1 {} record -o {} -- "
      "/bin/sh -c 'LD_PRELOAD=\"$LD_PRELOAD {}/tests/libcuda_uninit_fake.so\" exec "
      "{}/tests/cublas_epilogue_app'",
      testing::detraceExe(), run, bin, bin));
  ASSERT_EQ(o.status, 0) << o.out;
  const auto g = plannedGemms(o.out);
  ASSERT_EQ(g.size(), 1u) << o.out;
  EXPECT_EQ(names(g[0]), (std::vector<std::string>{"B", "D"})) << o.out;
  EXPECT_EQ(named(g[0], "D").bytes, 2u * 64 * 8 * 2);
}

// The epilogue itself is recorded with the GEMM (gemms.epilogue), at `meta` (which plans no
// operands) as at `digest`: the app's six calls, in order.
TEST(RecordSeam, CublasLtEpiloguesAreRecordedAtEveryLevel) {
  const std::string bin = DETRACE_BINARY_DIR;
  // GELU_AUX_BIAS, DRELU_BGRAD, BGRADB, BIAS, GELU_BIAS, DEFAULT (cublasLt.h's values).
  const std::vector<int32_t> expected = {164, 152, 512, 4, 36, 1};
  for (const char* level : {"meta", "digest"}) {
    SCOPED_TRACE(level);
    TempDir tmp;
    const std::string run = tmp.file("run");
    testing::ShellOutput o = testing::runShell(fmt::format(
        "DETRACE_DIAG_FINGERPRINTS_WITHOUT_CUPTI=1 {} record --capture {} -o {} -- "
        "/bin/sh -c 'LD_PRELOAD=\"$LD_PRELOAD {}/tests/libcuda_uninit_fake.so\" exec "
        "{}/tests/cublas_epilogue_app'",
        testing::detraceExe(), level, run, bin, bin));
    ASSERT_EQ(o.status, 0) << o.out;
    auto reader = testing::openOnlyRank(run);
    ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << o.out;
    auto recorded = (*reader)->gemms();
    ASSERT_TRUE(recorded.isOk());
    std::vector<int32_t> epilogues;
    for (const auto& [seq, g] : *recorded) epilogues.push_back(g.epilogue);
    EXPECT_EQ(epilogues, expected) << o.out;
  }
}

}  // namespace
}  // namespace detrace
