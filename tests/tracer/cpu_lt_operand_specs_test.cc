// The operands a cuBLASLt descriptor adds to a GEMM (LtOperands): its epilogue's bias vector and
// auxiliary matrix, its FP8 scales and amax outputs, with their roles, types and extents.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "detrace/tracer/operand_specs.h"

namespace detrace::tracer {
namespace {

using db::DType;
using db::OperandRole;

// A^T B in bf16 as PyTorch's linear layers call it: m outputs, n tokens, k inputs; C unread.
db::Gemm linear(int64_t m, int64_t n, int64_t k, DType dtype = DType::kBF16) {
  db::Gemm g;
  g.trans_a = 1;
  g.m = m; g.n = n; g.k = k;
  g.lda = g.ldb = k;
  g.ldc = g.ldd = m;
  g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = dtype;
  g.a_addr = 0x1000000; g.b_addr = 0x2000000; g.c_addr = g.d_addr = 0x3000000;
  return g;
}

GemmLayouts withEpilogue(LtEpilogue e) {
  GemmLayouts l;
  l.c_unread = true;
  l.lt.epilogue = static_cast<uint32_t>(e);
  l.lt.bias = 0x4000000;
  l.lt.aux = 0x5000000;
  return l;
}

std::optional<OperandSpec> find(const std::vector<OperandSpec>& specs, const std::string& name) {
  for (const OperandSpec& s : specs) {
    if (s.name == name) return s;
  }
  return std::nullopt;
}

// Every epilogue of cublasLt.h: which of the bias and aux it uses, and how.
TEST(OperandSpecs, EachEpilogueUsesItsBiasAndAux) {
  using E = LtEpilogue;
  struct Case {
    E e;
    BiasUse bias;
    AuxUse aux;
    bool mask;
  };
  const Case cases[] = {
      {E::kDefault, BiasUse::kNone, AuxUse::kNone, false},
      {E::kRelu, BiasUse::kNone, AuxUse::kNone, false},
      {E::kGelu, BiasUse::kNone, AuxUse::kNone, false},
      {E::kBias, BiasUse::kAdded, AuxUse::kNone, false},
      {E::kReluBias, BiasUse::kAdded, AuxUse::kNone, false},
      {E::kGeluBias, BiasUse::kAdded, AuxUse::kNone, false},
      {E::kReluAux, BiasUse::kNone, AuxUse::kWritten, true},
      {E::kReluAuxBias, BiasUse::kAdded, AuxUse::kWritten, true},
      {E::kGeluAux, BiasUse::kNone, AuxUse::kWritten, false},
      {E::kGeluAuxBias, BiasUse::kAdded, AuxUse::kWritten, false},
      {E::kDRelu, BiasUse::kNone, AuxUse::kRead, true},
      {E::kDReluBGrad, BiasUse::kGradRows, AuxUse::kRead, true},
      {E::kDGelu, BiasUse::kNone, AuxUse::kRead, false},
      {E::kDGeluBGrad, BiasUse::kGradRows, AuxUse::kRead, false},
      {E::kBGradA, BiasUse::kGradRows, AuxUse::kNone, false},
      {E::kBGradB, BiasUse::kGradCols, AuxUse::kNone, false},
      {static_cast<E>(1024), BiasUse::kNone, AuxUse::kNone, false},  // newer than the tracer
  };
  const db::Gemm g = linear(64, 8, 32);
  for (const Case& c : cases) {
    const uint32_t e = static_cast<uint32_t>(c.e);
    const EpilogueUse use = epilogueUse(e);
    EXPECT_EQ(use.bias, c.bias) << e;
    EXPECT_EQ(use.aux, c.aux) << e;
    if (c.aux != AuxUse::kNone) {
      EXPECT_EQ(use.mask, c.mask) << e;
    }
    GemmLayouts l = withEpilogue(c.e);
    l.lt.aux_ld = 128;  // a multiple of 128 bits and of 8 elements: good for either kind of aux
    const auto specs = gemmOperandSpecs(g, RowDigests::kAll, l);
    const auto bias = find(specs, "bias");
    const auto aux = find(specs, "aux");
    ASSERT_EQ(bias.has_value(), c.bias != BiasUse::kNone) << e;
    ASSERT_EQ(aux.has_value(), c.aux != AuxUse::kNone) << e;
    if (bias) {
      EXPECT_EQ(bias->slot, kSlotBias);
      const bool read = c.bias == BiasUse::kAdded;
      EXPECT_EQ(bias->role, read ? OperandRole::kInput : OperandRole::kOutput) << e;
      EXPECT_EQ(bias->bytes, (c.bias == BiasUse::kGradCols ? 8u : 64u) * 2) << e;
      EXPECT_EQ(bias->rows, 0) << e;
    }
    if (aux) {
      EXPECT_EQ(aux->slot, kSlotAux);
      const bool written = c.aux == AuxUse::kWritten;
      EXPECT_EQ(aux->role, written ? OperandRole::kOutput : OperandRole::kInput) << e;
      EXPECT_EQ(aux->dtype, c.mask ? DType::kU8 : DType::kBF16) << e;
    }
  }
}

// BIAS adds a vector of m elements of D's type (BIAS_DATA_TYPE unset), one whole digest.
TEST(OperandSpecs, AnEpiloguesBiasIsAnInputOfMElements) {
  const db::Gemm g = linear(96, 5, 64);
  const auto specs = gemmOperandSpecs(g, RowDigests::kTokens, withEpilogue(LtEpilogue::kGeluBias));
  ASSERT_EQ(specs.size(), 4u);  // A, B, D, bias
  const OperandSpec& bias = specs[3];
  EXPECT_EQ(bias.name, "bias");
  EXPECT_EQ(bias.role, OperandRole::kInput);
  EXPECT_EQ(bias.dtype, DType::kBF16);
  EXPECT_EQ(bias.address, 0x4000000u);
  EXPECT_EQ(bias.bytes, 96u * 2);
  EXPECT_EQ(bias.shape.toVector(), std::vector<int64_t>{96});
  EXPECT_EQ(bias.rows, 0);
  EXPECT_FALSE(outputsMayChangeInputs(specs));
  // The descriptor's BIAS_DATA_TYPE wins; an unset bias pointer gets nothing.
  GemmLayouts l = withEpilogue(LtEpilogue::kBias);
  l.lt.bias_dtype = DType::kF32;
  EXPECT_EQ(find(gemmOperandSpecs(g, RowDigests::kTokens, l), "bias")->bytes, 96u * 4);
  l.lt.bias = 0;
  EXPECT_FALSE(find(gemmOperandSpecs(g, RowDigests::kTokens, l), "bias"));
}

// The BGRAD epilogues write the bias gradient: D's rows (m) for BGRADA and the backward
// activations, its columns (n) for BGRADB. A gradient written over an input is an overlap.
TEST(OperandSpecs, BiasGradientsAreOutputsOfMOrNElements) {
  const db::Gemm g = linear(96, 40, 64);
  for (LtEpilogue e : {LtEpilogue::kBGradA, LtEpilogue::kDReluBGrad, LtEpilogue::kDGeluBGrad}) {
    GemmLayouts l = withEpilogue(e);
    l.lt.aux_ld = 128;
    const auto bias = find(gemmOperandSpecs(g, RowDigests::kAll, l), "bias");
    ASSERT_TRUE(bias);
    EXPECT_EQ(bias->role, OperandRole::kOutput);
    EXPECT_EQ(bias->bytes, 96u * 2);
  }
  GemmLayouts l = withEpilogue(LtEpilogue::kBGradB);
  const auto specs = gemmOperandSpecs(g, RowDigests::kAll, l);
  const auto bias = find(specs, "bias");
  ASSERT_TRUE(bias);
  EXPECT_EQ(bias->role, OperandRole::kOutput);
  EXPECT_EQ(bias->bytes, 40u * 2);
  EXPECT_EQ(bias->shape.toVector(), std::vector<int64_t>{40});
  EXPECT_FALSE(outputsMayChangeInputs(specs));
  l.lt.bias = static_cast<uint64_t>(g.b_addr) + 64;  // inside B
  EXPECT_TRUE(outputsMayChangeInputs(gemmOperandSpecs(g, RowDigests::kAll, l)));
}

// A batched GEMM's bias: one vector for every batch (BIAS_BATCH_STRIDE 0, the default), or one per
// batch `stride` elements apart; a negative stride gets no extent.
TEST(OperandSpecs, BatchedBiasFollowsItsBatchStride) {
  db::Gemm g = linear(96, 5, 64);
  g.batch_count = 3;
  g.stride_a = 96 * 64; g.stride_b = 5 * 64; g.stride_c = g.stride_d = 96 * 5;
  GemmLayouts l = withEpilogue(LtEpilogue::kReluBias);
  auto bias = find(gemmOperandSpecs(g, RowDigests::kAll, l), "bias");
  ASSERT_TRUE(bias);
  EXPECT_EQ(bias->bytes, 96u * 2) << "stride 0: one vector";
  EXPECT_EQ(bias->shape.toVector(), std::vector<int64_t>{96});
  l.lt.bias_stride = 128;
  bias = find(gemmOperandSpecs(g, RowDigests::kAll, l), "bias");
  ASSERT_TRUE(bias);
  EXPECT_EQ(bias->bytes, static_cast<uint64_t>((2 * 128 + 96) * 2));
  EXPECT_EQ(bias->shape.toVector(), (std::vector<int64_t>{3, 96}));
  l.lt.bias_stride = -128;
  EXPECT_FALSE(find(gemmOperandSpecs(g, RowDigests::kAll, l), "bias"));
}

// GELU's aux is a matrix of D's shape and D's type (EPILOGUE_AUX_DATA_TYPE unset), AUX_LD
// elements apart and AUX_BATCH_STRIDE between batches; its columns are D's tokens, so it keeps
// its rows under --row-digests tokens. Written by GELU_AUX, read by DGELU.
TEST(OperandSpecs, GeluAuxIsAMatrixWithItsOwnLdAndBatchStride) {
  db::Gemm g = linear(64, 8, 32);
  g.batch_count = 2;
  g.stride_a = 64 * 32; g.stride_b = 8 * 32; g.stride_c = g.stride_d = 64 * 8;
  GemmLayouts l = withEpilogue(LtEpilogue::kGeluAuxBias);
  l.lt.aux_ld = 72;
  l.lt.aux_stride = 72 * 8;  // packed: the rows run on through both batches
  const auto specs = gemmOperandSpecs(g, RowDigests::kTokens, l);
  auto aux = find(specs, "aux");
  ASSERT_TRUE(aux);
  EXPECT_EQ(aux->role, OperandRole::kOutput);
  EXPECT_EQ(aux->dtype, DType::kBF16);
  EXPECT_EQ(aux->bytes, static_cast<uint64_t>((72 * 8 + 7 * 72 + 64) * 2));
  EXPECT_EQ(aux->shape.toVector(), (std::vector<int64_t>{2, 8, 64}));
  EXPECT_EQ(aux->rows, 16) << "a row per token of each batch";
  EXPECT_EQ(aux->row_bytes, 64 * 2);
  EXPECT_EQ(aux->row_stride, 72 * 2);
  EXPECT_FALSE(outputsMayChangeInputs(specs));
  l.lt.aux_stride = 1024;  // not packed: a whole digest only
  aux = find(gemmOperandSpecs(g, RowDigests::kTokens, l), "aux");
  ASSERT_TRUE(aux);
  EXPECT_EQ(aux->bytes, static_cast<uint64_t>((1024 + 7 * 72 + 64) * 2));
  EXPECT_EQ(aux->rows, 0);
  l = withEpilogue(LtEpilogue::kDGelu);
  l.lt.aux_ld = 64;
  l.lt.aux_dtype = DType::kF16;  // the descriptor's type wins
  aux = find(gemmOperandSpecs(g, RowDigests::kTokens, l), "aux");
  ASSERT_TRUE(aux);
  EXPECT_EQ(aux->role, OperandRole::kInput);
  EXPECT_EQ(aux->dtype, DType::kF16);
  EXPECT_EQ(aux->bytes, static_cast<uint64_t>(64 * 8 * 2));  // stride 0: one matrix
  l.lt.aux_ld = 0;  // unset (cuBLASLt requires it): below m, no extent
  EXPECT_FALSE(find(gemmOperandSpecs(g, RowDigests::kTokens, l), "aux"));
}

// ReLU's aux is a bit mask: a bit per element of D, its ld and batch stride in bits (multiples of
// 128). It is digested as bytes, ceil(m / 8) per column, ld / 8 apart.
TEST(OperandSpecs, ReluAuxIsABitMaskDigestedAsBytes) {
  db::Gemm g = linear(100, 5, 32);
  GemmLayouts l = withEpilogue(LtEpilogue::kReluAux);
  l.lt.aux_ld = 128;
  auto aux = find(gemmOperandSpecs(g, RowDigests::kAll, l), "aux");
  ASSERT_TRUE(aux);
  EXPECT_EQ(aux->role, OperandRole::kOutput);
  EXPECT_EQ(aux->dtype, DType::kU8);
  EXPECT_EQ(aux->bytes, static_cast<uint64_t>(4 * 16 + 13));
  EXPECT_EQ(aux->shape.toVector(), (std::vector<int64_t>{5, 13}));
  EXPECT_EQ(aux->rows, 5);
  EXPECT_EQ(aux->row_bytes, 13);
  EXPECT_EQ(aux->row_stride, 16);
  // Batched: the stride in bits too (here packed, 5 columns of 128 bits).
  g.batch_count = 2;
  g.stride_a = 100 * 32; g.stride_b = 5 * 32; g.stride_c = g.stride_d = 100 * 5;
  l.lt.aux_stride = 128 * 5;
  aux = find(gemmOperandSpecs(g, RowDigests::kAll, l), "aux");
  ASSERT_TRUE(aux);
  EXPECT_EQ(aux->bytes, static_cast<uint64_t>(80 + 4 * 16 + 13));
  EXPECT_EQ(aux->rows, 10);
  // The backward pass reads it.
  l.lt.epilogue = static_cast<uint32_t>(LtEpilogue::kDReluBGrad);
  aux = find(gemmOperandSpecs(g, RowDigests::kAll, l), "aux");
  ASSERT_TRUE(aux);
  EXPECT_EQ(aux->role, OperandRole::kInput);
  // An ld or stride that is no whole number of bytes (cuBLASLt refuses it): no extent.
  l.lt.aux_ld = 132;
  EXPECT_FALSE(find(gemmOperandSpecs(g, RowDigests::kAll, l), "aux"));
  l.lt.aux_ld = 128;
  l.lt.aux_stride = 644;
  EXPECT_FALSE(find(gemmOperandSpecs(g, RowDigests::kAll, l), "aux"));
}

// The aux's layout is documented for a column-major D only: another D leaves it out.
TEST(OperandSpecs, AuxOfARowMajorDIsLeftOut) {
  const db::Gemm g = linear(64, 8, 32);
  GemmLayouts l = withEpilogue(LtEpilogue::kGeluAuxBias);
  l.lt.aux_ld = 64;
  l.order[3] = MatrixOrder::kRow;
  const auto specs = gemmOperandSpecs(g, RowDigests::kTokens, l);
  EXPECT_FALSE(find(specs, "aux"));
  EXPECT_TRUE(find(specs, "bias"));
}

// Default types cublasLt.h does not give (an FP8 kernel writing fp32 or fp8, an int8 D's aux) are
// not guessed: such a bias or aux gets no digest unless the descriptor names its type. An int8 D
// computed in int32 (IMMA) has a bias of the scale type.
TEST(OperandSpecs, UndocumentedDefaultTypesAreNotGuessed) {
  db::Gemm g = linear(64, 8, 32);
  g.a_dtype = g.b_dtype = DType::kF8E4M3;
  GemmLayouts l = withEpilogue(LtEpilogue::kGeluAuxBias);
  l.lt.aux_ld = 64;
  auto specs = gemmOperandSpecs(g, RowDigests::kAll, l);
  EXPECT_EQ(find(specs, "bias")->dtype, DType::kBF16) << "FP8 in, bf16 out: D's type";
  EXPECT_EQ(find(specs, "aux")->dtype, DType::kBF16);
  for (DType d : {DType::kF32, DType::kF8E4M3}) {
    g.c_dtype = g.d_dtype = d;
    specs = gemmOperandSpecs(g, RowDigests::kAll, l);
    EXPECT_FALSE(find(specs, "bias")) << db::dtypeName(d);
    EXPECT_FALSE(find(specs, "aux")) << db::dtypeName(d);
  }
  l.lt.bias_dtype = DType::kBF16;
  l.lt.aux_dtype = DType::kF16;
  specs = gemmOperandSpecs(g, RowDigests::kAll, l);
  EXPECT_EQ(find(specs, "bias")->bytes, 64u * 2);
  EXPECT_EQ(find(specs, "aux")->dtype, DType::kF16);
  db::Gemm imma = linear(64, 8, 32, DType::kI8);
  GemmLayouts il = withEpilogue(LtEpilogue::kBias);
  il.lt.imma = true;
  il.lt.scale_type = DType::kF32;
  EXPECT_EQ(find(gemmOperandSpecs(imma, RowDigests::kAll, il), "bias")->dtype, DType::kF32);
  il.lt.bias_dtype = DType::kUnknown;  // a type detrace does not know
  EXPECT_FALSE(find(gemmOperandSpecs(imma, RowDigests::kAll, il), "bias"));
}

// FP8 scales are one float each, inputs (C's only where C is read, the aux's only where the
// epilogue has an aux); the amax values one float each, outputs (the aux's only where it is
// written). A's and B's outer vectors have m and n floats; block scales and batched outer vectors
// get no extent. They come after D and the epilogue's operands, in slot order.
TEST(OperandSpecs, Fp8ScalesAreInputsAndAmaxesOutputs) {
  db::Gemm g = linear(64, 8, 32);
  g.a_dtype = g.b_dtype = DType::kF8E4M3;
  g.c_addr = 0x6000000;  // C apart from D, read
  GemmLayouts l = withEpilogue(LtEpilogue::kGeluAux);
  l.c_unread = false;
  l.lt.aux_ld = 64;
  for (size_t i = 0; i < l.lt.scales.size(); ++i) l.lt.scales[i].address = 0x7000000 + 0x100 * i;
  l.lt.amax_d = 0x7001000;
  l.lt.amax_aux = 0x7002000;
  auto specs = gemmOperandSpecs(g, RowDigests::kAll, l);
  const std::vector<std::string> names = {"A",       "B",       "C",      "D",         "aux",
                                          "A_scale", "B_scale", "C_scale", "D_scale", "D_amax",
                                          "aux_scale", "aux_amax"};
  std::vector<std::string> got;
  for (const OperandSpec& s : specs) got.push_back(s.name);
  ASSERT_EQ(got, names);
  for (size_t i = 1; i < specs.size(); ++i) EXPECT_LT(specs[i - 1].slot, specs[i].slot);
  for (size_t i = 5; i < specs.size(); ++i) {
    const bool amax = specs[i].name.find("amax") != std::string::npos;
    EXPECT_EQ(specs[i].role, amax ? OperandRole::kOutput : OperandRole::kInput) << specs[i].name;
    EXPECT_EQ(specs[i].dtype, DType::kF32) << specs[i].name;
    EXPECT_EQ(specs[i].bytes, 4u) << specs[i].name;
    EXPECT_EQ(specs[i].shape.toVector(), std::vector<int64_t>{1}) << specs[i].name;
  }
  EXPECT_EQ(find(specs, "A_scale")->slot, kSlotScaleA);
  EXPECT_EQ(find(specs, "aux_amax")->slot, kSlotAmaxAux);
  EXPECT_EQ(find(specs, "D_amax")->address, 0x7001000u);
  // C unread: no C, no C scale. Without an aux: no aux scale or amax; read, no aux amax.
  l.c_unread = true;
  l.lt.epilogue = static_cast<uint32_t>(LtEpilogue::kDGelu);
  specs = gemmOperandSpecs(g, RowDigests::kAll, l);
  EXPECT_FALSE(find(specs, "C_scale"));
  EXPECT_TRUE(find(specs, "aux_scale"));
  EXPECT_FALSE(find(specs, "aux_amax"));
  l.lt.epilogue = static_cast<uint32_t>(LtEpilogue::kDefault);
  specs = gemmOperandSpecs(g, RowDigests::kAll, l);
  EXPECT_FALSE(find(specs, "aux_scale"));
  EXPECT_TRUE(find(specs, "D_amax"));
  // Outer vectors: a float per row of op(A), per column of op(B); unbatched only.
  l.lt.scales[0].mode = l.lt.scales[1].mode = l.lt.scales[3].mode = LtScaleMode::kOuterVector;
  specs = gemmOperandSpecs(g, RowDigests::kAll, l);
  EXPECT_EQ(find(specs, "A_scale")->bytes, 64u * 4);
  EXPECT_EQ(find(specs, "B_scale")->bytes, 8u * 4);
  EXPECT_FALSE(find(specs, "D_scale")) << "D has no outer vector";
  g.batch_count = 2;
  g.stride_a = 64 * 32; g.stride_b = 8 * 32; g.stride_c = g.stride_d = 64 * 8;
  EXPECT_FALSE(find(gemmOperandSpecs(g, RowDigests::kAll, l), "A_scale"));
  g.batch_count = 1;
  l.lt.scales[0].mode = LtScaleMode::kOther;  // blocks (MXFP8, NVFP4, ...)
  EXPECT_FALSE(find(gemmOperandSpecs(g, RowDigests::kAll, l), "A_scale"));
  EXPECT_FALSE(outputsMayChangeInputs(gemmOperandSpecs(g, RowDigests::kAll, l)));
}

// A classic call (no LtOperands) and a cuBLASLt one without an epilogue or scales keep A, B, C, D
// alone, in their slots 0 to 3: the new operands never renumber them.
TEST(OperandSpecs, GemmsWithoutEpilogueOperandsKeepTheirFourSlots) {
  db::Gemm g = linear(64, 8, 32);
  g.c_addr = 0x6000000;
  GemmLayouts l;
  l.lt.bias = 0x4000000;  // set, but the default epilogue does not read it
  l.lt.aux = 0x5000000;
  const auto specs = gemmOperandSpecs(g, RowDigests::kAll, l);
  ASSERT_EQ(specs.size(), 4u);
  for (int32_t i = 0; i < 4; ++i) EXPECT_EQ(specs[static_cast<size_t>(i)].slot, i);
  EXPECT_EQ(specs[3].name, "D");
}

}  // namespace
}  // namespace detrace::tracer
