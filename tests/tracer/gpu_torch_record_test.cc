// Records a real PyTorch program (tests/tracer/torch_record_app.py: a small Qwen2 model from
// transformers with random weights, a torch.distributed NCCL all-reduce after every layer, world
// size 1) with `detrace record`, and checks the trace against what the program says it did:
// all-reduce count, nn.Linear calls by shape, and fingerprints equal to the CPU twin's digests of
// tensors the program saved. A second test replays a decode step from a CUDA graph. Skipped
// without a GPU, or without torch and transformers.
#include <sys/wait.h>

#include <array>
#include <bit>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "../db/test_util.h"
#include "common/gpu_test.h"
#include "detrace/db/reader.h"
#include "detrace/db/run.h"
#include "detrace/kernels/digest.h"
#include "common/shell.h"

namespace detrace {
namespace {

int shell(const std::string& cmd, std::string& out) {
  testing::ShellOutput o = testing::runShell(cmd);
  out += o.out;
  return o.status;
}

#define DETRACE_REQUIRE_TORCH()                                                               \
  do {                                                                                        \
    std::string probe_;                                                                       \
    if (shell("python3 -c 'import torch, transformers; assert torch.cuda.is_available()'",  \
              probe_) != 0)                                                                   \
      GTEST_SKIP() << "torch with CUDA and transformers are not importable";                 \
  } while (0)

std::vector<uint8_t> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The operand's digest computed on the CPU from bytes (docs/digest.md).
uint64_t cpuDigest(const db::Operand& o, const std::vector<uint8_t>& bytes) {
  if (o.rows <= 0) return kernels::digestCpu(bytes.data(), bytes.size());
  std::vector<uint64_t> rows(o.rows);
  kernels::digestRowsCpu(bytes.data(), static_cast<uint32_t>(o.rows), o.row_bytes, o.row_stride, rows.data());
  return XXH64(rows.data(), rows.size() * sizeof(uint64_t), static_cast<uint64_t>(o.rows));
}

struct Recording {
  std::unique_ptr<db::TraceReader> reader;
  nlohmann::json expect;
  std::string expect_dir;
};

void recordTorch(const std::string& tmp, const std::string& app_args, Recording& out,
                 const std::string& record_args = "") {
  out.expect_dir = tmp + "/expect";
  std::string log;
  int rc = shell(fmt::format("{0}/replay/detrace record -o {1}/run {5} -- python3 {2}/tests/tracer/torch_record_app.py "
                             "--expect-dir {3} {4}",
                             DETRACE_BINARY_DIR, tmp, DETRACE_SOURCE_DIR, out.expect_dir, app_args,
                             record_args),
                 log);
  ASSERT_EQ(rc, 0) << log;
  std::ifstream in(out.expect_dir + "/expect.json");
  ASSERT_TRUE(in.good()) << log;
  out.expect = nlohmann::json::parse(in);
  auto run = db::Run::open(tmp + "/run");
  ASSERT_TRUE(run.isOk()) << run.status().message();
  // torch may start helper processes that never touch the GPU: they leave no trace file.
  ASSERT_EQ(run->ranks().size(), 1u) << log;
  auto reader = run->openRank(run->ranks()[0].rank);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  out.reader = std::move(*reader);
  EXPECT_EQ(out.reader->rank().world_size, 1);
  EXPECT_EQ(out.reader->rank().rank, 0);
}

TEST(TracerTorch, Qwen2WithAllReduceMatchesWhatTheProgramDid) {
  DETRACE_REQUIRE_GPU();
  DETRACE_REQUIRE_TORCH();
  testing::TempDir tmp;
  Recording r;
  ASSERT_NO_FATAL_FAILURE(recordTorch(tmp.path().string(), "--batch 2 --steps 3", r));
  db::TraceReader& t = *r.reader;

  // Collectives: one all-reduce per decoder layer and forward.
  auto colls = t.collectives();
  ASSERT_TRUE(colls.isOk());
  int allreduces = 0;
  for (const auto& [seq, c] : *colls) {
    if (c.op != db::CollOp::kAllReduce) continue;
    ++allreduces;
    EXPECT_EQ(c.comm_nranks, 1);
    // With one rank NCCL runs no algorithm (a local copy), so its profiler reports none.
  }
  EXPECT_EQ(allreduces, r.expect["allreduce_calls"].get<int>());

  // GEMMs: every nn.Linear call as a GEMM with m = out_features, n = tokens, k = in_features.
  auto gemms = t.gemms();
  ASSERT_TRUE(gemms.isOk());
  std::map<std::tuple<int64_t, int64_t, int64_t>, int> got;
  for (const auto& [seq, g] : *gemms) ++got[{g.m, g.n, g.k}];
  for (const auto& call : r.expect["linear_calls"]) {
    int64_t out_f = call[0], in_f = call[1], tokens = call[2];
    int count = call[3];
    EXPECT_EQ((got[{out_f, tokens, in_f}]), count)
        << "nn.Linear(" << in_f << " -> " << out_f << ") on " << tokens << " tokens";
  }

  // Each GEMM's kernels name it as parent, on its stream (the program launches from one thread).
  {
    std::map<int64_t, int64_t> gemm_stream;  // seq -> stream
    std::map<int64_t, int> children;
    std::vector<db::Event> kernel_events;
    auto cursor = t.events();
    ASSERT_TRUE(cursor.isOk());
    for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
      const db::Event& e = cursor->event();
      if (e.kind == db::EventKind::kGemm) gemm_stream[e.seq] = e.stream;
      if (e.kind == db::EventKind::kKernel) kernel_events.push_back(e);
    }
    for (const db::Event& k : kernel_events) {
      auto g = gemm_stream.find(k.parent_seq);
      if (g == gemm_stream.end()) continue;
      ++children[k.parent_seq];
      EXPECT_EQ(k.stream, g->second) << "a kernel of GEMM " << k.parent_seq << " on another stream";
    }
    int childless = 0;
    for (const auto& [seq, stream] : gemm_stream) childless += children[seq] == 0;
    EXPECT_EQ(childless, 0) << "of " << gemm_stream.size() << " GEMMs";
  }

  // Fingerprints: the first all-reduces' buffers and the last lm_head output, against the CPU
  // twin's digests of the bytes the program saved.
  int checked = 0;
  int index = 0;
  for (const auto& [seq, c] : *colls) {
    if (c.op != db::CollOp::kAllReduce || index >= 3) continue;
    std::vector<uint8_t> bytes = readFile(fmt::format("{}/allreduce-{}.bin", r.expect_dir, index++));
    ASSERT_FALSE(bytes.empty());
    auto ops = t.operands(seq);
    ASSERT_TRUE(ops.isOk());
    for (const db::Operand& o : *ops) {
      if (t.str(o.name) != "send") continue;
      ASSERT_TRUE(o.has_digest);
      ASSERT_EQ(static_cast<size_t>(o.bytes), bytes.size());
      EXPECT_EQ(cpuDigest(o, bytes), o.digest) << "all-reduce " << index - 1;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3);
  int64_t vocab = r.expect["vocab"], tokens = r.expect["logits_shape"][0].get<int64_t>();
  for (size_t i = 1; i < r.expect["logits_shape"].size() - 1; ++i) tokens *= r.expect["logits_shape"][i].get<int64_t>();
  int64_t last_lm_head = -1;
  for (const auto& [seq, g] : *gemms) {
    if (g.m == vocab && g.n == tokens) last_lm_head = seq;
  }
  ASSERT_GE(last_lm_head, 0);
  std::vector<uint8_t> logits = readFile(r.expect_dir + "/logits.bin");
  auto ops = t.operands(last_lm_head);
  ASSERT_TRUE(ops.isOk());
  bool saw_output = false;
  for (const db::Operand& o : *ops) {
    if (o.role != db::OperandRole::kOutput) continue;
    saw_output = true;
    ASSERT_EQ(static_cast<size_t>(o.bytes), logits.size());
    EXPECT_EQ(cpuDigest(o, logits), o.digest) << "lm_head output";
  }
  EXPECT_TRUE(saw_output);

  auto stats = t.stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["events_dropped"], 0);
  EXPECT_EQ((*stats)["fingerprints_lost"], 0);
}

// Records `python3 tests/tracer/SCRIPT --expect-dir DIR/expect ARGS` into DIR/run: the process's
// trace, with the command's output in `log`.
void recordScript(const std::string& dir, const std::string& script, const std::string& args,
                  std::unique_ptr<db::TraceReader>& out, std::string& log) {
  int rc = shell(fmt::format("{0}/replay/detrace record -o {1}/run -- python3 {2}/tests/tracer/{3} "
                             "--expect-dir {1}/expect {4}",
                             DETRACE_BINARY_DIR, dir, DETRACE_SOURCE_DIR, script, args),
                 log);
  ASSERT_EQ(rc, 0) << log;
  auto reader = testing::openOnlyRank(dir + "/run");
  ASSERT_TRUE(reader.isOk()) << reader.status().message() << "\n" << log;
  out = std::move(*reader);
}

// NCCL called the way vLLM's and SGLang's pynccl call it (tests/tracer/pynccl_app.py: ctypes.CDLL,
// then every function looked up on that handle, never linked) is recorded like NCCL called through
// torch: its calls, communicator and numbers, and fingerprints of what each call read and wrote
// equal to the CPU twin's digests of the bytes the program saved (receive buffers poisoned
// before); all-reduces with PreMulSum operators are recorded as premulsum, with the host scalar's
// value (a device scalar is not read); an all-reduce captured into a CUDA graph gets one replayed op per replay, each with
// that replay's fingerprints; and a call NCCL refuses keeps its send digest and gets no receive
// digest (it wrote nothing); where the NCCL has ncclCommRevoke, the program's revoke goes through
// the tracer to NCCL and is counted.
TEST(TracerTorch, NcclCalledThroughCtypesIsRecordedWithFingerprints) {
  DETRACE_REQUIRE_GPU();
  DETRACE_REQUIRE_TORCH();
  testing::TempDir tmp;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string dir = tmp.path().string(), expect_dir = dir + "/expect";
  const int64_t count = 3000 + static_cast<int64_t>(rng.seed() % 6000);
  std::string log;
  std::unique_ptr<db::TraceReader> reader;
  ASSERT_NO_FATAL_FAILURE(recordScript(
      dir, "pynccl_app.py", fmt::format("--seed {} --count {}", rng.seed() % 100000, count), reader, log));
  std::ifstream in(expect_dir + "/expect.json");
  ASSERT_TRUE(in.good()) << log;
  const nlohmann::json expect = nlohmann::json::parse(in);
  db::TraceReader& t = *reader;
  auto colls = t.collectives();
  ASSERT_TRUE(colls.isOk()) << colls.status().message();
  const auto& calls = expect["calls"];
  const int replays = expect["replays"];
  // The eager calls, the captured call, one replayed op per replay, and the refused call.
  ASSERT_EQ(colls->size(), calls.size() + 1 + static_cast<size_t>(replays) + 1)
      << "NCCL through " << expect["library"] << "\n" << log;
  if (!expect["revoked"].is_null()) {  // NCCL 2.28.9 and later: the revoke went through the tracer
    EXPECT_EQ(expect["revoked"].get<int>(), 0) << log;
    auto stats = t.stats();
    ASSERT_TRUE(stats.isOk()) << stats.status().message();
    EXPECT_EQ((*stats)["nccl_comms_revoked"], 1) << log;
    EXPECT_EQ((*stats)["nccl_calls_revoked"], 0) << "a blocking communicator has no calls waiting";
  }
  {
    SCOPED_TRACE(fmt::format("the refused call (NCCL said {})", expect["refused_result"].get<int>()));
    const auto& [seq, c] = colls->back();
    EXPECT_EQ(c.count, expect["refused_count"].get<int64_t>());
    auto ops = t.operands(seq);
    ASSERT_TRUE(ops.isOk()) << ops.status().message();
    ASSERT_EQ(ops->size(), 1u) << "a refused call's receive buffer was fingerprinted";
    const db::Operand& o = ops->front();
    EXPECT_EQ(t.str(o.name), "send");
    ASSERT_TRUE(o.has_digest);
    EXPECT_EQ(cpuDigest(o, readFile(expect_dir + "/refused-send.bin")), o.digest);
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    SCOPED_TRACE(i);
    const auto& [seq, c] = (*colls)[i];
    const std::string op = calls[i]["op"];
    EXPECT_EQ(c.op, op == "allgather" ? db::CollOp::kAllGather : db::CollOp::kAllReduce);
    if (op == "premulsum-host") {  // a PreMulSum operator: the scalar NCCL copied from the host
      EXPECT_EQ(c.redop, db::RedOp::kPreMulSum);
      ASSERT_TRUE(c.has_redop_scalar);
      EXPECT_EQ(std::bit_cast<float>(static_cast<uint32_t>(c.redop_scalar)), 0.5f);
    } else if (op == "premulsum-device") {  // its scalar in device memory: not read
      EXPECT_EQ(c.redop, db::RedOp::kPreMulSum);
      EXPECT_FALSE(c.has_redop_scalar);
    } else if (op == "allreduce") {
      EXPECT_EQ(c.redop, db::RedOp::kSum);
    }
    EXPECT_EQ(c.count, calls[i]["count"].get<int64_t>());
    EXPECT_EQ(c.comm_seq, static_cast<int64_t>(i));
    EXPECT_EQ(c.comm_nranks, 1);
    EXPECT_EQ(c.comm_id, (*colls)[0].second.comm_id);
    auto ops = t.operands(seq);
    ASSERT_TRUE(ops.isOk()) << ops.status().message();
    int checked = 0;
    for (const db::Operand& o : *ops) {
      const std::string name = t.str(o.name);
      const std::vector<uint8_t> bytes = readFile(fmt::format("{}/{}-{}.bin", expect_dir, i, name));
      ASSERT_FALSE(bytes.empty()) << name;
      ASSERT_TRUE(o.has_digest) << name;
      ASSERT_EQ(static_cast<size_t>(o.bytes), bytes.size()) << name;
      EXPECT_EQ(cpuDigest(o, bytes), o.digest) << name;
      ++checked;
    }
    EXPECT_EQ(checked, 2) << "a send and a receive digest";
  }
  std::vector<db::GraphOp> rows;
  ASSERT_TRUE(t.forEachGraphOp([&](const db::GraphOp& g) {
                 rows.push_back(g);
                 return Status::ok();
               }).isOk());
  ASSERT_EQ(rows.size(), static_cast<size_t>(replays)) << log;
  std::set<uint64_t> send_digests;
  for (const db::GraphOp& g : rows) {
    SCOPED_TRACE(fmt::format("replay {}", g.replay));
    auto coll = t.collective(g.seq);
    ASSERT_TRUE(coll.isOk() && coll->has_value());
    EXPECT_EQ((*coll)->op, db::CollOp::kAllReduce);
    EXPECT_EQ((*coll)->count, expect["replay_count"].get<int64_t>());
    EXPECT_EQ((*coll)->comm_id, (*colls)[0].second.comm_id);
    auto ops = t.operands(g.seq);
    ASSERT_TRUE(ops.isOk()) << ops.status().message();
    ASSERT_EQ(ops->size(), 2u);
    for (const db::Operand& o : *ops) {
      const std::string name = t.str(o.name);
      const std::vector<uint8_t> bytes = readFile(fmt::format("{}/replay{}-{}.bin", expect_dir, g.replay, name));
      ASSERT_FALSE(bytes.empty()) << name;
      ASSERT_TRUE(o.has_digest) << name;
      EXPECT_EQ(cpuDigest(o, bytes), o.digest) << name;
      if (name == "send") send_digests.insert(o.digest);
    }
  }
  EXPECT_EQ(send_digests.size(), static_cast<size_t>(replays)) << "each replay its own data";
}

// cuBLAS called through ctypes (tests/tracer/ctypes_cublas_app.py: torch's libcublas loaded again
// with ctypes.CDLL, every function looked up on that handle) is recorded like a linked call: the
// GEMM's shape, and its operands' fingerprints equal to the CPU twin's digests of the bytes the
// program saved (C poisoned before the call).
TEST(TracerTorch, CublasCalledThroughCtypesIsRecordedWithFingerprints) {
  DETRACE_REQUIRE_GPU();
  DETRACE_REQUIRE_TORCH();
  testing::TempDir tmp;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string dir = tmp.path().string(), expect_dir = dir + "/expect";
  const int64_t m = 32 + static_cast<int64_t>(rng.seed() % 97), n = 8 + static_cast<int64_t>(rng.seed() % 41),
                k = 16 + static_cast<int64_t>(rng.seed() % 57);
  std::string log;
  std::unique_ptr<db::TraceReader> reader;
  ASSERT_NO_FATAL_FAILURE(recordScript(
      dir, "ctypes_cublas_app.py", fmt::format("--seed {} --m {} --n {} --k {}", rng.seed() % 100000, m, n, k),
      reader, log));
  db::TraceReader& t = *reader;
  auto gemms = t.gemms();
  ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
  int found = 0;
  for (const auto& [seq, g] : *gemms) {
    if (g.m != m || g.n != n || g.k != k) continue;  // torch's own warm-up GEMM is 8 x 8 x 8
    ++found;
    EXPECT_EQ(t.str(g.api), "cublasSgemm");
    auto ops = t.operands(seq);
    ASSERT_TRUE(ops.isOk()) << ops.status().message();
    std::set<std::string> checked;
    for (const db::Operand& o : *ops) {
      const std::string name = t.str(o.name);
      const std::vector<uint8_t> bytes = readFile(fmt::format("{}/{}.bin", expect_dir, name));
      ASSERT_FALSE(bytes.empty()) << name;
      ASSERT_TRUE(o.has_digest) << name;
      ASSERT_EQ(static_cast<size_t>(o.bytes), bytes.size()) << name;
      EXPECT_EQ(cpuDigest(o, bytes), o.digest) << name;
      checked.insert(name);
    }
    EXPECT_EQ(checked, (std::set<std::string>{"A", "B", "D"}));  // C is D
  }
  EXPECT_EQ(found, 1) << "the ctypes GEMM (" << m << " x " << n << " x " << k << ")\n" << log;
}

// cublasLtMatmul with every matrix stored row-major (tests/tracer/ctypes_cublaslt_app.py, through
// ctypes on torch's cuBLASLt, padded leading dimensions): each operand's fingerprint covers its own
// extent, rows ld apart (not the column-major extent, which reads past the matrix), equal to the
// CPU twin's digests of the bytes the program saved; under the default --row-digests tokens, A's,
// C's and D's rows (the tokens of a row-major x W) have digests and B's do not. With beta = 0 the
// C pointer (16 bytes: cuBLASLt does not read it) is not fingerprinted at all.
TEST(TracerTorch, CublasLtRowMajorMatricesAreFingerprintedByTheirOwnExtent) {
  DETRACE_REQUIRE_GPU();
  DETRACE_REQUIRE_TORCH();
  testing::TempDir tmp;
  testing::Rng rng;
  SCOPED_TRACE(rng.seed());
  const std::string dir = tmp.path().string(), expect_dir = dir + "/expect";
  const int64_t m = 8 + static_cast<int64_t>(rng.seed() % 57), n = 16 + static_cast<int64_t>(rng.seed() % 97),
                k = 16 + static_cast<int64_t>(rng.seed() % 61), pad = 4 * static_cast<int64_t>(1 + rng.seed() % 5);
  std::string log;
  std::unique_ptr<db::TraceReader> reader;
  ASSERT_NO_FATAL_FAILURE(recordScript(
      dir, "ctypes_cublaslt_app.py",
      fmt::format("--seed {} --m {} --n {} --k {} --pad {}", rng.seed() % 100000, m, n, k, pad), reader, log));
  db::TraceReader& t = *reader;
  auto gemms = t.gemms();
  ASSERT_TRUE(gemms.isOk()) << gemms.status().message();
  int call = 0;
  for (const auto& [seq, g] : *gemms) {
    if (g.m != m || g.n != n || g.k != k) continue;  // torch's own warm-up GEMM is 8 x 8 x 8
    SCOPED_TRACE(fmt::format("call {}", call));
    EXPECT_EQ(t.str(g.api), "cublasLtMatmul");
    EXPECT_EQ(g.lda, k + pad);
    auto ops = t.operands(seq);
    ASSERT_TRUE(ops.isOk()) << ops.status().message();
    std::set<std::string> checked;
    for (const db::Operand& o : *ops) {
      const std::string name = t.str(o.name);
      SCOPED_TRACE(name);
      const std::vector<uint8_t> bytes = readFile(fmt::format("{}/{}-{}.bin", expect_dir, call, name));
      ASSERT_FALSE(bytes.empty());
      ASSERT_TRUE(o.has_digest);
      ASSERT_EQ(static_cast<size_t>(o.bytes), bytes.size()) << "not the row-major extent";
      EXPECT_EQ(o.rows, name == "B" ? 0 : m);
      EXPECT_EQ(cpuDigest(o, bytes), o.digest) << "GPU digest != CPU twin";
      if (o.rows > 0) {
        EXPECT_EQ(o.row_stride, (name == "A" ? k + pad : n + pad) * 4);
        std::vector<uint64_t> rows(static_cast<size_t>(o.rows));
        kernels::digestRowsCpu(bytes.data(), static_cast<uint32_t>(o.rows), o.row_bytes, o.row_stride,
                               rows.data());
        EXPECT_EQ(rows, o.row_digests);
      }
      checked.insert(name);
    }
    const std::set<std::string> expected = call == 0 ? std::set<std::string>{"A", "B", "D"}
                                                     : std::set<std::string>{"A", "B", "C", "D"};
    EXPECT_EQ(checked, expected);
    ++call;
  }
  EXPECT_EQ(call, 2) << "the two row-major matmuls (" << m << " x " << n << " x " << k << ")\n" << log;
}

// Under the default --row-digests tokens, eager attention's batched GEMMs (a matrix of keys or
// values per sequence and head as cuBLAS's A) keep A's rows, which are tokens, while the linear
// layers' A (the weight) gets its whole digest alone. Every operand's digest, and its row digests,
// equal the CPU twin's digests of the bytes the tracer copied (--capture full).
TEST(TracerTorch, EagerAttentionKeepsTheRowsOfItsBatchedA) {
  DETRACE_REQUIRE_GPU();
  DETRACE_REQUIRE_TORCH();
  testing::TempDir tmp;
  Recording r;
  ASSERT_NO_FATAL_FAILURE(recordTorch(tmp.path().string(), "--batch 2 --steps 1 --attn eager", r,
                                      "--capture full --capture-ops gemm"));
  db::TraceReader& t = *r.reader;
  EXPECT_EQ(t.metaValue("row_digests"), "tokens");
  auto gemms = t.gemms();
  ASSERT_TRUE(gemms.isOk());
  int batched_a = 0, weight_a = 0, operands = 0, biased = 0;
  for (const auto& [seq, g] : *gemms) {
    auto ops = t.operands(seq);
    ASSERT_TRUE(ops.isOk());
    // The recorded epilogue agrees with the operands: a bias operand exactly where the epilogue
    // has one (BIAS, RELU_BIAS, GELU_BIAS and their AUX forms, and the bias gradients: cublasLt.h).
    const std::set<int32_t> kBiasEpilogues = {4, 6, 36, 134, 164, 152, 208, 256, 512};
    const bool bias_epilogue = kBiasEpilogues.count(g.epilogue) > 0;
    bool bias_operand = false;
    for (const db::Operand& o : *ops) bias_operand = bias_operand || t.str(o.name) == "bias";
    EXPECT_NE(g.epilogue, db::kUnset) << "GEMM " << seq;
    EXPECT_EQ(bias_operand, bias_epilogue) << "GEMM " << seq << " epilogue " << db::epilogueText(g.epilogue);
    biased += bias_epilogue ? 1 : 0;
    for (const db::Operand& o : *ops) {
      const std::string name = t.str(o.name);
      SCOPED_TRACE(fmt::format("GEMM {} ({} x {} x {}, batch {}) {}", seq, g.m, g.n, g.k,
                               g.batch_count, name));
      ASSERT_TRUE(o.has_digest);
      ASSERT_GT(o.capture_bytes, 0) << "not copied";
      auto bytes = t.captureBytes(o.id);
      ASSERT_TRUE(bytes.isOk()) << bytes.status().message();
      EXPECT_EQ(cpuDigest(o, *bytes), o.digest) << "GPU digest != CPU twin";
      if (o.rows > 0) {
        std::vector<uint64_t> rows(static_cast<size_t>(o.rows));
        kernels::digestRowsCpu(bytes->data(), static_cast<uint32_t>(o.rows), o.row_bytes,
                               o.row_stride, rows.data());
        EXPECT_EQ(rows, o.row_digests);
      }
      ++operands;
      if (name != "A") continue;
      if (g.batch_count > 1 && g.stride_a != 0) {
        // Rows need the batches packed (one column stride through them), as under --row-digests all.
        const int64_t a_cols = g.trans_a ? g.m : g.k;
        const bool packed = g.stride_a == g.lda * a_cols;
        EXPECT_EQ(o.rows, packed ? a_cols * g.batch_count : 0) << "a batched A keeps its rows";
        batched_a += packed ? 1 : 0;
      } else {
        EXPECT_EQ(o.rows, 0) << "a weight: its whole digest alone";
        ++weight_a;
      }
    }
  }
  EXPECT_GT(batched_a, 0) << "no batched GEMM (eager attention's) among " << gemms->size();
  std::printf("GEMMs %zu, with a bias epilogue %d\n", gemms->size(), biased);
  EXPECT_GT(weight_a, 0);
  EXPECT_GT(operands, 0);
  auto stats = t.stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["fingerprints_lost"], 0);
}

TEST(TracerTorch, Qwen2DecodeReplayedFromACudaGraph) {
  DETRACE_REQUIRE_GPU();
  DETRACE_REQUIRE_TORCH();
  testing::TempDir tmp;
  Recording r;
  ASSERT_NO_FATAL_FAILURE(recordTorch(tmp.path().string(), "--batch 2 --steps 4 --cuda-graph", r));
  db::TraceReader& t = *r.reader;
  int replays = r.expect["graph_replays"];
  ASSERT_EQ(replays, 4);
  // Kernels replayed from the graph carry graph ids; each replay runs the same kernels.
  auto cursor = t.events();
  ASSERT_TRUE(cursor.isOk());
  std::map<int64_t, int> per_graph_kernels;
  std::map<std::string, int> names;
  std::map<int64_t, int> children;  // replayed kernels per parent op
  for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
    const db::Event& e = cursor->event();
    if (e.kind != db::EventKind::kKernel || e.graph_id == db::kUnset) continue;
    EXPECT_EQ(e.launch.api, db::LaunchApi::kGraph);
    EXPECT_GT(e.gpu_start_ns, 0);
    ++per_graph_kernels[e.graph_id];
    ++names[t.str(e.name)];
    if (e.parent_seq != db::kUnset) ++children[e.parent_seq];
  }
  ASSERT_FALSE(names.empty()) << "no kernel replayed from a CUDA graph was recorded";
  for (const auto& [name, n] : names) EXPECT_EQ(n % replays, 0) << name << " ran " << n << " times";
  // The all-reduces and GEMMs captured into the graph are recorded once, at capture (without
  // fingerprints), and every replay adds each of them again, with fingerprints of its own.
  auto colls = t.collectives();
  ASSERT_TRUE(colls.isOk());
  EXPECT_GE(colls->size(), static_cast<size_t>(2 * 2));  // warm-up passes + capture, 2 layers
  std::map<int64_t, int> per_template;
  std::map<int64_t, std::set<int64_t>> replays_of;
  size_t graph_ops = 0, fingerprinted = 0, replayed_gemms = 0;
  ASSERT_TRUE(t.forEachGraphOp([&](const db::GraphOp& g) {
    ++graph_ops;
    // A replayed GEMM is found among the replay's kernels by its graph nodes: its kernels name it.
    auto gemm = t.gemm(g.seq);
    if (gemm.isOk() && gemm->has_value()) {
      ++replayed_gemms;
      EXPECT_GE(children[g.seq], 1) << "no replayed kernel names the GEMM at " << g.seq;
    }
    ++per_template[g.template_seq];
    replays_of[g.template_seq].insert(g.replay);
    auto ops = t.operands(g.seq);
    bool all = ops.isOk() && !ops->empty();
    if (ops.isOk()) {
      for (const db::Operand& o : *ops) all = all && o.has_digest;
    }
    fingerprinted += all ? 1 : 0;
    return Status::ok();
  }).isOk());
  ASSERT_GT(graph_ops, 0u) << "no replayed GEMM or all-reduce";
  for (const auto& [tmpl, n] : per_template) {
    EXPECT_GE(tmpl, 0) << "the captured call is in the trace";
    EXPECT_EQ(n, replays) << "captured op at " << tmpl;
    EXPECT_EQ(replays_of[tmpl].size(), static_cast<size_t>(replays));
  }
  EXPECT_EQ(fingerprinted, graph_ops) << "replayed ops without fingerprints";
  auto stats = t.stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["graph_replays_fingerprinted"], replays);
  EXPECT_EQ((*stats)["graph_replays_lost"], 0);
  EXPECT_EQ((*stats)["tracer_slots_timed_out"], 0);
  // Only the all-reduces are placed between their own digests; every GEMM by its graph nodes.
  ASSERT_GT(replayed_gemms, 0u);
  EXPECT_EQ((*stats)["tracer_graph_ops_placed_by_count"], static_cast<int64_t>(graph_ops - replayed_gemms));
}

// torch.compile (Inductor), as engines run their models: Triton kernels launched through the
// driver API between cuBLAS GEMMs, and with `reduce-overhead` the steps replayed from Inductor's
// CUDA graph. The program (tests/tracer/torch_compile_app.py) runs once under torch.profiler, in
// a process of its own, and twice under detrace, all three on one Inductor cache of the test's
// own (the same kernels and tuned launch settings in each). The recorded steps (after the first
// NVTX range `step 0`) must hold the kernels the profiler counted, name by name, every one with
// its GPU times; the last step's logits, the lm_head GEMM's output, must have the digest the CPU
// twin computes from the bytes the program saved; and the two recorded runs must not part.
void checkCompiled(const std::string& mode) {
  DETRACE_REQUIRE_GPU();
  DETRACE_REQUIRE_TORCH();
  {
    std::string probe;
    if (shell("python3 -c 'import triton'", probe) != 0) GTEST_SKIP() << "Triton is not importable: " << probe;
  }
  testing::TempDir tmp;
  const std::string dir = tmp.path().string();
  const std::string app = fmt::format("python3 {}/tests/tracer/torch_compile_app.py --mode {}",
                                      DETRACE_SOURCE_DIR, mode);
  const std::string cache = fmt::format("TORCHINDUCTOR_CACHE_DIR={}/inductor", dir);
  std::string log;
  ASSERT_EQ(shell(fmt::format("{} {} --profile --expect-dir {}/profile", cache, app, dir), log), 0) << log;
  std::ifstream prof_in(dir + "/profile/kernels.json");
  ASSERT_TRUE(prof_in.good()) << log;
  const nlohmann::json prof = nlohmann::json::parse(prof_in);
  std::map<std::string, int> profiled;
  for (const auto& [name, n] : prof.at("kernels").items()) profiled[name] = n.get<int>();
  ASSERT_FALSE(profiled.empty()) << log;

  // Recorded with the compiler in the program's own process: no worker processes to record.
  for (const char* run : {"a", "b"}) {
    ASSERT_EQ(shell(fmt::format("{0} TORCHINDUCTOR_COMPILE_THREADS=1 {1}/replay/detrace record -o {2}/run-{3} "
                                "-- {4} --expect-dir {2}/expect-{3}",
                                cache, DETRACE_BINARY_DIR, dir, run, app),
                    log), 0) << log;
  }
  auto opened = testing::openOnlyRank(dir + "/run-a");
  ASSERT_TRUE(opened.isOk()) << opened.status().message() << "\n" << log;
  db::TraceReader& t = **opened;
  EXPECT_TRUE(t.finished());
  std::ifstream expect_in(dir + "/expect-a/expect.json");
  ASSERT_TRUE(expect_in.good()) << log;
  const nlohmann::json expect = nlohmann::json::parse(expect_in);
  auto stats = t.stats();
  ASSERT_TRUE(stats.isOk());
  const std::string counters = fmt::format(
      "late records {}, placed late {}, slots timed out {}, graph records dropped {}",
      (*stats)["tracer_activities_late"], (*stats)["tracer_records_placed_late"],
      (*stats)["tracer_slots_timed_out"], (*stats)["tracer_graph_records_dropped"]);

  auto gemms = t.gemms();
  ASSERT_TRUE(gemms.isOk());
  std::map<int64_t, const db::Gemm*> gemm_at;
  for (const auto& [seq, g] : *gemms) gemm_at[seq] = &g;
  std::map<std::string, int> recorded;
  int64_t first_step = db::kUnset, logits_op = db::kUnset, kernels = 0, graph_kernels = 0, triton = 0;
  const int64_t vocab = expect["vocab"];
  int64_t tokens = 1;
  for (size_t i = 0; i + 1 < expect["logits_shape"].size(); ++i) tokens *= expect["logits_shape"][i].get<int64_t>();
  auto cursor = t.events();
  ASSERT_TRUE(cursor.isOk());
  for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
    const db::Event& e = cursor->event();
    if (e.kind == db::EventKind::kMarker && first_step == db::kUnset && t.str(e.name) == "step 0") first_step = e.seq;
    if (first_step == db::kUnset) continue;
    if (e.kind == db::EventKind::kKernel) {
      const std::string name = t.str(e.name);
      ++recorded[name];
      ++kernels;
      triton += name.starts_with("triton_");
      graph_kernels += e.graph_id != db::kUnset;
      EXPECT_GT(e.gpu_start_ns, 0) << name << " at " << e.seq;
      EXPECT_GE(e.gpu_end_ns, e.gpu_start_ns) << name << " at " << e.seq;
    }
    // The last lm_head GEMM (a replayed one too: an event with its graph op) wrote the logits.
    if (auto g = gemm_at.find(e.seq); g != gemm_at.end() && g->second->m == vocab && g->second->n == tokens) {
      logits_op = e.seq;
    }
  }
  ASSERT_NE(first_step, db::kUnset) << "no NVTX range 'step 0' in the trace";
  std::string differs;
  for (const auto& [name, n] : profiled) {
    if (auto it = recorded.find(name); it == recorded.end() || it->second != n) {
      differs += fmt::format("\n  profiler {} detrace {}  {}", n, it == recorded.end() ? 0 : it->second, name);
    }
  }
  for (const auto& [name, n] : recorded) {
    if (!profiled.contains(name)) differs += fmt::format("\n  profiler 0 detrace {}  {}", n, name);
  }
  EXPECT_TRUE(differs.empty()) << "kernels of the recorded steps against torch.profiler's (" << counters
                               << "):" << differs;
  EXPECT_GT(triton, 0) << "no Triton kernel among the recorded steps\n" << log;
  if (mode == "reduce-overhead") {
    EXPECT_GT(graph_kernels, 0) << "no kernel of the steps was replayed from a CUDA graph\n" << log;
  }
  std::printf("%s: %lld kernels in the steps (%lld Triton, %lld from graphs), %zu GEMMs in all; %s\n",
              mode.c_str(), static_cast<long long>(kernels), static_cast<long long>(triton),
              static_cast<long long>(graph_kernels), gemms->size(), counters.c_str());

  ASSERT_NE(logits_op, db::kUnset) << "no lm_head GEMM (m = " << vocab << ", n = " << tokens << ") in the steps";
  if (mode == "reduce-overhead") {
    auto replayed = t.graphOp(logits_op);
    ASSERT_TRUE(replayed.isOk());
    EXPECT_TRUE(replayed->has_value()) << "the last lm_head GEMM was not replayed from a graph";
  }
  std::vector<uint8_t> logits = readFile(dir + "/expect-a/logits.bin");
  ASSERT_FALSE(logits.empty());
  auto ops = t.operands(logits_op);
  ASSERT_TRUE(ops.isOk());
  int outputs = 0;
  for (const db::Operand& o : *ops) {
    if (o.role != db::OperandRole::kOutput) continue;
    ++outputs;
    ASSERT_TRUE(o.has_digest) << "the lm_head output at " << logits_op;
    ASSERT_EQ(static_cast<size_t>(o.bytes), logits.size());
    EXPECT_EQ(cpuDigest(o, logits), o.digest) << "the last step's logits";
  }
  EXPECT_EQ(outputs, 1);
  EXPECT_EQ((*stats)["events_dropped"], 0);
  EXPECT_EQ((*stats)["fingerprints_lost"], 0);
  EXPECT_EQ((*stats)["tracer_slots_timed_out"], 0);
  EXPECT_EQ((*stats)["graph_replays_lost"], 0);

  // Run to run: the same compiled program, the same bits (exit status 0: identical and complete).
  std::string diff;
  EXPECT_EQ(shell(fmt::format("{0}/replay/detrace diff {1}/run-a {1}/run-b", DETRACE_BINARY_DIR, dir), diff), 0) << diff;
}

TEST(TracerTorch, CompiledModelIsRecordedKernelForKernel) { checkCompiled("default"); }

TEST(TracerTorch, CompiledModelReplayedFromInductorsCudaGraph) { checkCompiled("reduce-overhead"); }

}  // namespace
}  // namespace detrace
