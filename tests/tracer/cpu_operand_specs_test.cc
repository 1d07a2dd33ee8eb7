// Which bytes the tracer fingerprints for a GEMM or collective: layout rules on random shapes.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "detrace/tracer/operand_specs.h"

namespace detrace::tracer {
namespace {

TEST(OperandSpecs, PyTorchLinearRowsAreTokens) {
  // PyTorch's y = x W^T for x: [tokens, in], W: [out, in] calls cuBLAS (column-major) with
  // transa = T, transb = N, m = out, n = tokens, k = in, A = W (lda = in), B = x (ldb = in),
  // C = D = y (ldc = out).
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    int64_t tokens = 1 + rng() % 300, in = 8 * (1 + rng() % 512), out = 8 * (1 + rng() % 512);
    db::Gemm g;
    g.trans_a = 1;
    g.trans_b = 0;
    g.m = out; g.n = tokens; g.k = in;
    g.lda = in; g.ldb = in; g.ldc = out; g.ldd = out;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.a_addr = 0x1000; g.b_addr = 0x100000; g.c_addr = g.d_addr = 0x900000;
    auto specs = gemmOperandSpecs(g, RowDigests::kAll);
    ASSERT_EQ(specs.size(), 3u);  // A, B, D (C is D)
    const OperandSpec& w = specs[0];
    const OperandSpec& x = specs[1];
    const OperandSpec& y = specs[2];
    EXPECT_EQ(w.name, "A");
    EXPECT_EQ(w.rows, out);  // weight rows
    EXPECT_EQ(w.row_bytes, in * 2);
    EXPECT_EQ(x.name, "B");
    EXPECT_EQ(x.role, db::OperandRole::kInput);
    EXPECT_EQ(x.rows, tokens);  // one row per token
    EXPECT_EQ(x.row_bytes, in * 2);
    EXPECT_EQ(x.row_stride, in * 2);
    EXPECT_EQ(x.bytes, static_cast<uint64_t>(tokens * in * 2));
    EXPECT_EQ(y.name, "D");
    EXPECT_EQ(y.role, db::OperandRole::kOutput);
    EXPECT_EQ(y.rows, tokens);
    EXPECT_EQ(y.row_bytes, out * 2);
    EXPECT_EQ(y.bytes, static_cast<uint64_t>(tokens * out * 2));
  }
}

TEST(OperandSpecs, PaddedLeadingDimensionAndSeparateC) {
  db::Gemm g;
  g.m = 10; g.n = 3; g.k = 4;
  g.lda = 16; g.ldb = 4; g.ldc = 12; g.ldd = 12;  // A and C/D padded
  g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kF32;
  g.a_addr = 0x10; g.b_addr = 0x20; g.c_addr = 0x30; g.d_addr = 0x40;
  auto specs = gemmOperandSpecs(g, RowDigests::kAll);
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].rows, 4);                  // A stored m x k: k columns of m
  EXPECT_EQ(specs[0].row_bytes, 10 * 4);
  EXPECT_EQ(specs[0].row_stride, 16 * 4);
  EXPECT_EQ(specs[0].bytes, static_cast<uint64_t>((3 * 16 + 10) * 4));  // first to last byte
  EXPECT_EQ(specs[2].name, "C");
  EXPECT_EQ(specs[2].role, db::OperandRole::kInput);
  EXPECT_EQ(specs[3].row_stride, 12 * 4);
}

TEST(OperandSpecs, BatchedGemmRowsOnlyWhenPacked) {
  db::Gemm g;
  g.m = 8; g.n = 4; g.k = 8;
  g.lda = 8; g.ldb = 8; g.ldc = 8; g.ldd = 8;
  g.batch_count = 3;
  g.stride_a = 64; g.stride_b = 100; g.stride_c = g.stride_d = 32;
  g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kF16;
  g.a_addr = 1; g.b_addr = 2; g.c_addr = g.d_addr = 3;
  auto specs = gemmOperandSpecs(g, RowDigests::kAll);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].rows, 8 * 3);  // packed: stride = ld * cols
  EXPECT_EQ(specs[1].rows, 0);      // B batches are 100 apart, not 32: whole extent only
  EXPECT_EQ(specs[1].bytes, static_cast<uint64_t>((2 * 100 + 3 * 8 + 8) * 2));
  EXPECT_EQ(specs[2].rows, 4 * 3);
}

// The stored shapes the trace records for each operand (held inline since the third session of
// 2026-12-02): {columns, rows per column} of each column-major matrix, {batch, ...} for batched
// GEMMs (a collective's are checked in CollectivesUseTheLastGemmRowWidth).
TEST(OperandSpecs, ShapesAreTheStoredMatrices) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t m = 1 + rng() % 500, n = 1 + rng() % 500, k = 1 + rng() % 500;
    const int batch = 1 + static_cast<int>(rng() % 4);
    db::Gemm g;
    g.trans_a = static_cast<int>(rng() % 2);
    g.trans_b = static_cast<int>(rng() % 2);
    g.m = m; g.n = n; g.k = k;
    const int64_t a_rows = g.trans_a ? k : m, a_cols = g.trans_a ? m : k;
    const int64_t b_rows = g.trans_b ? n : k, b_cols = g.trans_b ? k : n;
    g.lda = a_rows; g.ldb = b_rows; g.ldc = m; g.ldd = m;
    g.batch_count = batch;
    g.stride_a = a_rows * a_cols; g.stride_b = b_rows * b_cols; g.stride_c = g.stride_d = m * n;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.a_addr = 0x1000; g.b_addr = 0x200000; g.c_addr = g.d_addr = 0x900000;
    const auto specs = gemmOperandSpecs(g, RowDigests::kAll);
    ASSERT_EQ(specs.size(), 3u);
    auto expected = [&](int64_t rows, int64_t cols) {
      return batch > 1 ? std::vector<int64_t>{batch, cols, rows} : std::vector<int64_t>{cols, rows};
    };
    EXPECT_EQ(specs[0].shape.toVector(), expected(a_rows, a_cols)) << "A, trial " << trial;
    EXPECT_EQ(specs[1].shape.toVector(), expected(b_rows, b_cols)) << "B, trial " << trial;
    EXPECT_EQ(specs[2].shape.toVector(), expected(m, n)) << "D, trial " << trial;
    EXPECT_EQ(specs[2].shape.size(), batch > 1 ? 3u : 2u);
    EXPECT_EQ(specs[2].shape[specs[2].shape.size() - 1], m);
  }
  EXPECT_EQ(OperandShape({1, 2, 3, 4}).toVector(), (std::vector<int64_t>{1, 2, 3}));  // 3 kept
  EXPECT_EQ(OperandShape().toVector(), std::vector<int64_t>{});
}

// --row-digests tokens: rows only where the stored columns are the output's (the tokens): B when
// not transposed, C and D. A and a transposed B keep their whole extent, shape and everything
// else, with no rows; with the default (all) every operand keeps its rows as before.
TEST(OperandSpecs, TokenRowsOnlyLeaveAAndTransposedBWhole) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t m = 1 + rng() % 400, n = 1 + rng() % 400, k = 1 + rng() % 400;
    db::Gemm g;
    g.trans_a = static_cast<int>(rng() % 2);
    g.trans_b = static_cast<int>(rng() % 2);
    g.m = m; g.n = n; g.k = k;
    g.lda = (g.trans_a ? k : m) + static_cast<int64_t>(rng() % 3);
    g.ldb = (g.trans_b ? n : k) + static_cast<int64_t>(rng() % 3);
    g.ldc = g.ldd = m + static_cast<int64_t>(rng() % 3);
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kF16;
    g.a_addr = 0x1000; g.b_addr = 0x400000; g.c_addr = 0x800000; g.d_addr = 0xc00000;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": m " << m << " n " << n << " k "
                                      << k << " ta " << g.trans_a << " tb " << g.trans_b);
    const auto all = gemmOperandSpecs(g, RowDigests::kAll);
    const auto tokens = gemmOperandSpecs(g, RowDigests::kTokens);
    ASSERT_EQ(all.size(), 4u);
    ASSERT_EQ(tokens.size(), 4u);
    EXPECT_EQ(all[0].rows, g.trans_a ? m : k) << "all: A keeps its stored columns as rows";
    EXPECT_EQ(all[1].rows, g.trans_b ? k : n);
    for (size_t i = 0; i < 4; ++i) {
      const bool whole = i == 0 || (i == 1 && g.trans_b);
      EXPECT_EQ(tokens[i].name, all[i].name);
      EXPECT_EQ(tokens[i].bytes, all[i].bytes) << all[i].name;
      EXPECT_EQ(tokens[i].address, all[i].address);
      EXPECT_EQ(tokens[i].shape.toVector(), all[i].shape.toVector());
      EXPECT_EQ(tokens[i].rows, whole ? 0 : all[i].rows) << all[i].name;
      EXPECT_EQ(tokens[i].row_bytes, whole ? 0 : all[i].row_bytes) << all[i].name;
      EXPECT_EQ(tokens[i].row_stride, whole ? 0 : all[i].row_stride) << all[i].name;
    }
    EXPECT_EQ(tokens[3].rows, n) << "D: one row per token";
  }
}

// --row-digests tokens on batched GEMMs: an A with a matrix of its own per batch (eager attention's
// keys or values: its columns are tokens) keeps its rows; an A shared by every batch (stride 0: a
// weight) and an unbatched A do not. B, C and D as for one matrix.
TEST(OperandSpecs, TokenRowsKeepABatchedAsAttentionIs) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t m = 1 + rng() % 200, n = 1 + rng() % 200, k = 1 + rng() % 200;
    db::Gemm g;
    g.trans_a = static_cast<int>(rng() % 2);
    g.trans_b = 0;
    g.m = m; g.n = n; g.k = k;
    g.batch_count = 1 + static_cast<int32_t>(rng() % 8);
    g.lda = g.trans_a ? k : m;
    g.ldb = k;
    g.ldc = g.ldd = m;
    const int64_t a_cols = g.trans_a ? m : k;
    const bool shared_a = rng() % 3 == 0;  // one weight for every batch
    g.stride_a = shared_a ? 0 : g.lda * a_cols;
    g.stride_b = g.ldb * n;
    g.stride_c = g.stride_d = g.ldd * n;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.a_addr = 0x1000; g.b_addr = 0x4000000; g.d_addr = 0x8000000; g.c_addr = g.d_addr;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": m " << m << " n " << n << " k "
                                      << k << " ta " << g.trans_a << " batch " << g.batch_count
                                      << (shared_a ? " shared A" : ""));
    const auto all = gemmOperandSpecs(g, RowDigests::kAll);
    const auto tokens = gemmOperandSpecs(g, RowDigests::kTokens);
    ASSERT_EQ(tokens.size(), 3u);  // A, B, D (C is D)
    ASSERT_EQ(all.size(), 3u);
    const bool a_keeps = g.batch_count > 1 && !shared_a;
    EXPECT_EQ(tokens[0].rows, a_keeps ? a_cols * g.batch_count : 0);
    EXPECT_EQ(tokens[0].rows, a_keeps ? all[0].rows : 0);
    EXPECT_EQ(tokens[0].row_bytes, a_keeps ? all[0].row_bytes : 0);
    EXPECT_EQ(tokens[0].bytes, all[0].bytes);
    EXPECT_EQ(tokens[1].rows, n * g.batch_count) << "B: the tokens of every batch";
    EXPECT_EQ(tokens[2].rows, n * g.batch_count) << "D";
  }
}

TEST(OperandSpecs, OnlyDisjointOutputsLetInputsBeFingerprintedAfterTheCall) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t m = 8 * (1 + rng() % 64), n = 1 + rng() % 64, k = 8 * (1 + rng() % 64);
    db::Gemm g;
    g.m = m; g.n = n; g.k = k;
    g.lda = m; g.ldb = k; g.ldc = g.ldd = m;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kF32;
    g.a_addr = 0x10000000;
    g.b_addr = 0x20000000;
    g.c_addr = g.d_addr = 0x30000000;
    EXPECT_FALSE(outputsMayChangeInputs(gemmOperandSpecs(g, RowDigests::kAll))) << "separate buffers";
    // D placed somewhere inside or just past B's extent (B: k x n floats from 0x20000000).
    const int64_t b_bytes = k * n * 4;
    const int64_t at = static_cast<int64_t>(rng() % static_cast<uint64_t>(b_bytes + 64)) & ~int64_t{3};
    g.c_addr = g.d_addr = g.b_addr + at;
    const bool overlaps = at < b_bytes;
    EXPECT_EQ(outputsMayChangeInputs(gemmOperandSpecs(g, RowDigests::kAll)), overlaps) << "D at B + " << at;
  }
  OperandSpec both;
  both.role = db::OperandRole::kInOut;
  both.address = 0x1000;
  both.bytes = 64;
  EXPECT_TRUE(outputsMayChangeInputs({both})) << "an operand read and written by the call";
  db::Collective c;
  c.op = db::CollOp::kAllReduce;
  c.dtype = db::DType::kF32;
  c.count = 1024;
  c.send_addr = c.recv_addr = 0x5000;  // in place
  EXPECT_TRUE(outputsMayChangeInputs(collectiveOperandSpecs(c, 0)));
  c.recv_addr = 0x5000 + 4096;  // just past the send buffer
  EXPECT_FALSE(outputsMayChangeInputs(collectiveOperandSpecs(c, 0)));
}

TEST(OperandSpecs, CollectivesUseTheLastGemmRowWidth) {
  db::Collective c;
  c.op = db::CollOp::kAllReduce;
  c.dtype = db::DType::kBF16;
  c.count = 7 * 4096;
  c.comm_nranks = 4;
  c.send_addr = 0x100;
  c.recv_addr = 0x200;
  auto specs = collectiveOperandSpecs(c, 4096 * 2);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "send");
  EXPECT_EQ(specs[0].rows, 7);
  EXPECT_EQ(specs[1].role, db::OperandRole::kOutput);
  EXPECT_EQ(specs[1].bytes, 7u * 4096 * 2);
  EXPECT_EQ(specs[0].shape.toVector(), (std::vector<int64_t>{7, 4096}));  // {rows, row elements}
  EXPECT_EQ(specs[1].shape.toVector(), (std::vector<int64_t>{7, 4096}));
  // A width that does not divide the buffer: whole digests only.
  auto odd = collectiveOperandSpecs(c, 3000);
  EXPECT_EQ(odd[0].rows, 0);
  EXPECT_EQ(odd[0].shape.toVector(), std::vector<int64_t>{7 * 4096});  // {elements}
  // AllGather receives nranks times what it sends; Send has no receive buffer.
  c.op = db::CollOp::kAllGather;
  auto ag = collectiveOperandSpecs(c, 0);
  EXPECT_EQ(ag[1].bytes, 4 * ag[0].bytes);
  c.op = db::CollOp::kSend;
  EXPECT_EQ(collectiveOperandSpecs(c, 0).size(), 1u);
}

}  // namespace
}  // namespace detrace::tracer
