// Which bytes the tracer fingerprints for a GEMM or collective: layout rules on random shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "detrace/tracer/operand_specs.h"

namespace detrace::tracer {
namespace {

// PyTorch's GEMMs pass beta = 0 with C = D: C is not read.
GemmLayouts betaZero() {
  GemmLayouts l;
  l.c_unread = true;
  return l;
}

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
    auto specs = gemmOperandSpecs(g, RowDigests::kAll, betaZero());
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
  auto specs = gemmOperandSpecs(g, RowDigests::kAll, betaZero());
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
    const auto specs = gemmOperandSpecs(g, RowDigests::kAll, betaZero());
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
    const auto all = gemmOperandSpecs(g, RowDigests::kAll, betaZero());
    const auto tokens = gemmOperandSpecs(g, RowDigests::kTokens, betaZero());
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

// cuBLASLt layouts (GemmLayouts): a row-major matrix's extent is its rows, `ld` elements apart,
// and those rows are its stored lines; tiled orders and arrays of pointers get no digests at all
// (their bytes are no strided extent, and reading one as if it were reads past the allocation);
// C is left out where beta is 0. Random shapes with padded leading dimensions.
TEST(OperandSpecs, CublasLtLayoutsGiveEachMatrixItsOwnExtent) {
  std::mt19937 rng(std::random_device{}());
  const MatrixOrder kOrders[] = {MatrixOrder::kColumn, MatrixOrder::kRow, MatrixOrder::kUnreadable};
  for (int trial = 0; trial < 200; ++trial) {
    db::Gemm g;
    g.trans_a = static_cast<int>(rng() % 2);
    g.trans_b = static_cast<int>(rng() % 2);
    g.m = 1 + rng() % 300; g.n = 1 + rng() % 300; g.k = 1 + rng() % 300;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kF16;
    g.a_addr = 0x10000000; g.b_addr = 0x20000000; g.c_addr = 0x30000000; g.d_addr = 0x40000000;
    GemmLayouts l;
    for (auto& o : l.order) o = kOrders[rng() % 3];
    l.c_unread = rng() % 4 == 0;
    // Each matrix's logical rows x cols, and its ld: the line length of its order plus padding.
    const int64_t dims[4][2] = {{g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k},
                                {g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n},
                                {g.m, g.n},
                                {g.m, g.n}};
    int64_t* lds[4] = {&g.lda, &g.ldb, &g.ldc, &g.ldd};
    for (int i = 0; i < 4; ++i) {
      const int64_t line = l.order[i] == MatrixOrder::kRow ? dims[i][1] : dims[i][0];
      *lds[i] = line + static_cast<int64_t>(rng() % 3) * 8;
    }
    const auto specs = gemmOperandSpecs(g, RowDigests::kAll, l);
    const char* names[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i) {
      auto it = std::find_if(specs.begin(), specs.end(), [&](const OperandSpec& s) { return s.name == names[i]; });
      const bool expected = l.order[i] != MatrixOrder::kUnreadable && !(i == 2 && l.c_unread);
      ASSERT_EQ(it != specs.end(), expected) << names[i] << ", trial " << trial;
      if (!expected) continue;
      const bool row_major = l.order[i] == MatrixOrder::kRow;
      const int64_t lines = row_major ? dims[i][0] : dims[i][1];
      const int64_t per_line = row_major ? dims[i][1] : dims[i][0];
      EXPECT_EQ(it->bytes, static_cast<uint64_t>(((lines - 1) * *lds[i] + per_line) * 2)) << names[i];
      EXPECT_EQ(it->shape.toVector(), (std::vector<int64_t>{lines, per_line})) << names[i];
      EXPECT_EQ(it->rows, lines) << names[i];
      EXPECT_EQ(it->row_bytes, per_line * 2) << names[i];
      EXPECT_EQ(it->row_stride, *lds[i] * 2) << names[i];
    }
  }
}

// --row-digests tokens with row-major matrices (a caller computing D = x W by rows): D's and an
// untransposed A's stored lines are tokens and keep their rows; B (the weight) has none.
TEST(OperandSpecs, TokenRowsOfRowMajorMatricesAreDsAndAs) {
  db::Gemm g;
  g.m = 5; g.n = 64; g.k = 32;  // x: 5 tokens x 32, W: 32 x 64, D: 5 x 64, all row-major
  g.lda = 32; g.ldb = 64; g.ldc = g.ldd = 64;
  g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
  g.a_addr = 0x1000; g.b_addr = 0x100000; g.c_addr = g.d_addr = 0x900000;
  GemmLayouts rows;
  rows.order.fill(MatrixOrder::kRow);
  rows.c_unread = true;
  auto specs = gemmOperandSpecs(g, RowDigests::kTokens, rows);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].rows, 5) << "A = x: a row per token";
  EXPECT_EQ(specs[1].rows, 0) << "B = W: whole digest only";
  EXPECT_EQ(specs[1].bytes, static_cast<uint64_t>(32 * 64 * 2));
  EXPECT_EQ(specs[2].rows, 5) << "D: a row per token";
  g.trans_a = 1;
  g.lda = 5;
  specs = gemmOperandSpecs(g, RowDigests::kTokens, rows);
  EXPECT_EQ(specs[0].rows, 0) << "a transposed A's lines run along the tokens";
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
    EXPECT_FALSE(outputsMayChangeInputs(gemmOperandSpecs(g, RowDigests::kAll, betaZero()))) << "separate buffers";
    // D placed somewhere inside or just past B's extent (B: k x n floats from 0x20000000).
    const int64_t b_bytes = k * n * 4;
    const int64_t at = static_cast<int64_t>(rng() % static_cast<uint64_t>(b_bytes + 64)) & ~int64_t{3};
    g.c_addr = g.d_addr = g.b_addr + at;
    const bool overlaps = at < b_bytes;
    EXPECT_EQ(outputsMayChangeInputs(gemmOperandSpecs(g, RowDigests::kAll, betaZero())), overlaps) << "D at B + " << at;
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

// A GEMM that accumulates into its output (beta != 0, C = D: PyTorch's addmm where the bias is
// copied into the result first, as for a single token) reads C: its bytes before the call are an
// input, fingerprinted before the call (the output overlaps it), and D's after it.
TEST(OperandSpecs, InPlaceAccumulationReadsC) {
  db::Gemm g;
  g.trans_a = 1;
  g.m = 4096; g.n = 1; g.k = 4096;
  g.lda = g.ldb = g.ldc = g.ldd = 4096;
  g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
  g.a_addr = 0x100000; g.b_addr = 0x9000000; g.c_addr = g.d_addr = 0xa000000;
  const auto specs = gemmOperandSpecs(g, RowDigests::kTokens, GemmLayouts{});
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[2].name, "C");
  EXPECT_EQ(specs[2].role, db::OperandRole::kInput);
  EXPECT_EQ(specs[2].bytes, specs[3].bytes);
  EXPECT_EQ(specs[2].rows, 1);
  EXPECT_TRUE(outputsMayChangeInputs(specs));
  EXPECT_EQ(gemmOperandSpecs(g, RowDigests::kTokens, betaZero()).size(), 3u) << "beta 0: C unread";
}

// A strided batch with a negative stride has batches below its address: no extent from it.
TEST(OperandSpecs, NegativeBatchStridesGetNoExtent) {
  db::Gemm g;
  g.m = g.n = g.k = 64;
  g.lda = g.ldb = g.ldc = g.ldd = 64;
  g.batch_count = 4;
  g.stride_a = -4096; g.stride_b = 4096; g.stride_c = g.stride_d = 4096;
  g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kF16;
  g.a_addr = 0x800000; g.b_addr = 0x100000; g.c_addr = g.d_addr = 0x200000;
  for (const OperandSpec& s : gemmOperandSpecs(g, RowDigests::kAll, betaZero())) {
    EXPECT_NE(s.name, "A");
    EXPECT_LT(s.bytes, uint64_t{1} << 20) << s.name;
  }
}

// A strided batch of no matrices (an empty micro-batch) reads and writes nothing, wherever its
// pointers point: none of its operands is fingerprinted, whatever its shapes; nor those of a
// negative count, which cuBLAS refuses (inputs digested before a call would be read first).
TEST(OperandSpecs, ABatchOfNoMatricesHasNoOperands) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    db::Gemm g;
    g.m = 1 + static_cast<int64_t>(rng() % 512);
    g.n = 1 + static_cast<int64_t>(rng() % 512);
    g.k = 1 + static_cast<int64_t>(rng() % 512);
    g.trans_a = rng() % 2;
    g.trans_b = rng() % 2;
    g.lda = g.ldb = g.ldc = g.ldd = 512;
    g.stride_a = g.stride_b = g.stride_c = g.stride_d = 512 * 512;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.a_addr = 0x100000; g.b_addr = 0x200000; g.c_addr = g.d_addr = 0x300000;
    g.batch_count = 1;
    ASSERT_FALSE(gemmOperandSpecs(g, RowDigests::kAll, GemmLayouts{}).empty()) << "the control";
    for (int32_t batch : {0, -1, -1 - static_cast<int32_t>(rng() % 1000)}) {
      g.batch_count = batch;
      EXPECT_TRUE(gemmOperandSpecs(g, RowDigests::kAll, GemmLayouts{}).empty()) << "batch " << batch;
      EXPECT_TRUE(gemmOperandSpecs(g, RowDigests::kTokens, betaZero()).empty()) << "batch " << batch;
    }
  }
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

// NCCL ignores a broadcast's send buffer and a reduce's receive buffer on ranks other than the
// root: they are not fingerprinted there (a caller may pass a stale or small buffer), nor on a rank
// the tracer does not know (-1), which may be any. The root and every other collective keep both.
TEST(OperandSpecs, BuffersNcclIgnoresOffTheRootAreLeftOut) {
  std::mt19937 rng(std::random_device{}());
  using db::CollOp;
  for (int trial = 0; trial < 100; ++trial) {
    db::Collective c;
    const CollOp ops[] = {CollOp::kAllReduce, CollOp::kBroadcast, CollOp::kReduce, CollOp::kAllGather};
    c.op = ops[rng() % 4];
    c.dtype = db::DType::kF32;
    c.count = 1 + static_cast<int64_t>(rng() % 4096);
    c.comm_nranks = 1 + static_cast<int32_t>(rng() % 8);
    c.comm_rank = static_cast<int32_t>(rng() % (c.comm_nranks + 1)) - 1;  // -1: not known
    c.root = c.op == CollOp::kBroadcast || c.op == CollOp::kReduce ? static_cast<int32_t>(rng() % c.comm_nranks) : -1;
    c.send_addr = 0x10000;
    c.recv_addr = 0x900000;
    const bool off_root = c.root >= 0 && c.comm_rank != c.root;  // an unknown rank (-1) too
    std::vector<std::string> names;
    for (const OperandSpec& s : collectiveOperandSpecs(c, 0)) names.push_back(s.name);
    std::vector<std::string> expected = {"send", "recv"};
    if (off_root && c.op == CollOp::kBroadcast) expected = {"recv"};
    if (off_root && c.op == CollOp::kReduce) expected = {"send"};
    EXPECT_EQ(names, expected) << collOpName(c.op) << " rank " << c.comm_rank << " root " << c.root;
  }
}

// Arguments no GPU memory can hold (a refused call's: dimensions near INT_MAX, strides near
// LLONG_MAX, 2^42 rows) give no extent, never one wrapped past 2^64 (a digest would read past the
// program's memory); a large but real operand keeps its extent.
TEST(OperandSpecs, ExtentsPastAnyMemoryOrOverflowingAreDropped) {
  constexpr int64_t kIntMax = 2147483647, kLongMax = 9223372036854775807;
  auto gemm = [](int64_t m, int64_t n, int64_t k, int32_t batch, int64_t stride) {
    db::Gemm g;
    g.m = m; g.n = n; g.k = k;
    g.lda = m; g.ldb = k; g.ldc = g.ldd = m;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kF32;
    g.a_addr = 0x1000; g.b_addr = 0x2000; g.c_addr = g.d_addr = 0x3000;
    g.batch_count = batch;
    g.stride_a = g.stride_b = g.stride_c = g.stride_d = stride;
    return gemmOperandSpecs(g, RowDigests::kAll, betaZero());
  };
  EXPECT_TRUE(gemm(kIntMax, kIntMax, kIntMax, 1, 0).empty()) << "2^62 elements a matrix";
  EXPECT_TRUE(gemm(64, 64, 64, kIntMax, kLongMax).empty()) << "batches a stride of 2^63 apart";
  const auto tall = gemm(int64_t{1} << 42, 2, 2, 1, 0);  // A and D 32 TiB: past any GPU's memory
  ASSERT_EQ(tall.size(), 1u);
  EXPECT_EQ(tall[0].name, "B");
  EXPECT_EQ(gemm(int64_t{1} << 40, 2, 2, 1, 0).size(), 3u) << "8 TiB: kept (managed memory may be that large)";
  db::Gemm one_column;  // one column: its ld bounds nothing, and must not overflow a row stride
  one_column.m = 4; one_column.n = 1; one_column.k = 1;
  one_column.lda = 4; one_column.ldb = int64_t{1} << 62; one_column.ldc = one_column.ldd = 4;
  one_column.a_dtype = one_column.b_dtype = one_column.c_dtype = one_column.d_dtype = db::DType::kF32;
  one_column.a_addr = 0x1000; one_column.b_addr = 0x2000; one_column.c_addr = one_column.d_addr = 0x3000;
  for (const OperandSpec& s : gemmOperandSpecs(one_column, RowDigests::kAll, betaZero())) {
    EXPECT_GE(s.row_stride, 0) << s.name;
    if (s.name == "B") {
      EXPECT_EQ(s.rows, 0) << "no row stride to give";
    }
  }
  const auto big = gemm(100000, 100000, 8, 1, 0);  // D: 40 GB of fp32, a real (large) operand
  ASSERT_EQ(big.size(), 3u);
  EXPECT_EQ(big[2].bytes, uint64_t{100000} * 100000 * 4);

  db::Collective c;
  c.op = db::CollOp::kAllGather;
  c.dtype = db::DType::kF32;
  c.comm_nranks = 8;
  c.send_addr = 0x1000;
  c.recv_addr = 0x2000;
  c.count = int64_t{1} << 61;  // times 8 ranks overflows; times 4 bytes too
  EXPECT_TRUE(collectiveOperandSpecs(c, 0).empty());
  c.count = 1 << 20;
  const auto ok = collectiveOperandSpecs(c, 0);
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[1].bytes, uint64_t{8} << 22) << "the gathered receive buffer";
}

}  // namespace
}  // namespace detrace::tracer
