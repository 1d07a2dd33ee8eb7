// Synthetic runs with captured operands (what `detrace record --capture full` writes) for the
// replay tests, and the generator of the committed ones in tests/data/replay. Operand extents,
// shapes and rows follow tracer/src/operand_specs.cc; outputs are made with known orders by CPU
// twins, so a test knows which implementation must reproduce them.
//
// The committed run tests/data/replay/synth (regenerate with DETRACE_UPDATE_GOLDEN=1, see
// replay_golden_test.cc) is a toy tensor-parallel step on 3 ranks, run at 4 tokens (events 0-5)
// and then at 8 tokens (events 6-11), the 4 tokens of the first sitting at rows 5, 2, 7, 0 of the
// second (a request alone, then in a batch). Per rank and step:
//   +0  kernel "embedding"
//   +1  cublasLtMatmul TN, m=64 (hidden) n=tokens k=64, bf16 -> fp32. The recorded D: a split-K 2
//       sum (two fp32 halves of K, then added) at 4 tokens, a sequential fp32 sum at 8 (a library
//       switching kernels with the batch size)
//   +2  AllReduce sum fp32, tokens x 64 per rank; the recorded recv: ring order from rank 2 at 4
//       tokens, reversed rank order at 8 (an all-reduce switching algorithms with size)
//   +3  kernel "rmsnorm"
//   +4  cublasLtMatmul with fingerprints only (not captured)
//   +5  AllGather (moves bytes; not replayable)
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detrace/db/run.h"
#include "detrace/db/writer.h"
#include "detrace/kernels/digest.h"
#include "detrace/kernels/dtype.h"
#include "detrace/kernels/reduce.h"

namespace detrace::testing::synth {

using Bytes = std::vector<uint8_t>;

// Deterministic, portable values: 16-bit integers / 2^14 in [-2, 2), rounded to bf16.
inline Bytes randomBf16(std::mt19937& rng, int64_t count) {
  Bytes out(static_cast<size_t>(count * 2));
  for (int64_t i = 0; i < count; ++i) {
    const float v = static_cast<float>(static_cast<int32_t>(rng() % 65536) - 32768) / 16384.0f;
    const uint16_t h = kernels::floatToBf16(v);
    std::memcpy(out.data() + i * 2, &h, 2);
  }
  return out;
}

// Deterministic fp32 values with 24-bit mantissas and exponents from -8 to 8: sums of a few of
// them round differently in different orders.
inline Bytes randomF32(std::mt19937& rng, int64_t count) {
  Bytes out(static_cast<size_t>(count * 4));
  for (int64_t i = 0; i < count; ++i) {
    const float m = static_cast<float>(static_cast<int32_t>(rng() % (1u << 25)) - (1 << 24)) /
                    static_cast<float>(1 << 24);
    const float v = std::ldexp(m, static_cast<int>(rng() % 17) - 8);
    std::memcpy(out.data() + i * 4, &v, 4);
  }
  return out;
}

// Per-rank bf16 buffers whose sums depend on the order: for each element, rank 0 holds a large
// value B (2^12 to 2^20), rank world/2 holds -B, the others small values in [-2, 2) (a single
// rank: small values only). B cancels exactly when its two halves meet first and swallows the
// small values' low bits when they meet B first, as in a real residual stream's all-reduce.
inline std::vector<Bytes> cancellingSends(std::mt19937& rng, int world, int64_t count) {
  std::vector<Bytes> sends;
  for (int r = 0; r < world; ++r) sends.push_back(randomBf16(rng, count));
  if (world < 2) return sends;
  for (int64_t i = 0; i < count; ++i) {
    const float big = std::ldexp(1.0f + static_cast<float>(rng() % 128) / 128.0f,
                                 12 + static_cast<int>(rng() % 9));
    const uint16_t pos = kernels::floatToBf16(big), neg = kernels::floatToBf16(-big);
    std::memcpy(sends[0].data() + i * 2, &pos, 2);
    std::memcpy(sends[static_cast<size_t>(world / 2)].data() + i * 2, &neg, 2);
  }
  return sends;
}

// A column-major operand as operand_specs.cc describes it: `rows` x `cols` elements, ld apart;
// fingerprints always, the bytes when `capture`.
inline db::Operand columnMajor(db::TraceWriter& w, int32_t slot, const char* name,
                               db::OperandRole role, db::DType dtype, int64_t rows, int64_t cols,
                               int64_t ld, const Bytes& extent, bool capture, int64_t address) {
  db::Operand o;
  const int64_t esize = db::dtypeSize(dtype);
  o.slot = slot;
  o.name = w.intern(name);
  o.role = role;
  o.dtype = dtype;
  o.shape = {cols, rows};
  o.address = address;
  o.bytes = ((cols - 1) * ld + rows) * esize;
  o.rows = cols;
  o.row_bytes = rows * esize;
  o.row_stride = ld * esize;
  o.has_digest = true;
  o.row_digests.resize(static_cast<size_t>(cols));
  kernels::digestRowsCpu(extent.data(), static_cast<uint32_t>(cols), static_cast<uint64_t>(o.row_bytes),
                         static_cast<uint64_t>(o.row_stride), o.row_digests.data());
  o.digest = kernels::wholeOfRowsCpu(o.row_digests.data(), o.row_digests.size());  // as the tracer
  if (capture) {
    o.capture = extent;
    o.capture_bytes = static_cast<int64_t>(extent.size());
  }
  return o;
}

// A collective buffer of `count` elements in rows of `row_elems` (0: no rows).
inline db::Operand buffer(db::TraceWriter& w, int32_t slot, const char* name, db::OperandRole role,
                          db::DType dtype, int64_t count, int64_t row_elems, const Bytes& bytes,
                          bool capture, int64_t address) {
  db::Operand o;
  const int64_t esize = db::dtypeSize(dtype);
  o.slot = slot;
  o.name = w.intern(name);
  o.role = role;
  o.dtype = dtype;
  o.shape = {count};
  o.address = address;
  o.bytes = count * esize;
  o.has_digest = true;
  o.digest = kernels::digestCpu(bytes.data(), bytes.size());
  if (row_elems > 0) {
    o.rows = count / row_elems;
    o.row_bytes = row_elems * esize;
    o.row_stride = o.row_bytes;
    o.shape = {o.rows, row_elems};
    o.row_digests.resize(static_cast<size_t>(o.rows));
    kernels::digestRowsCpu(bytes.data(), static_cast<uint32_t>(o.rows), static_cast<uint64_t>(o.row_bytes),
                           static_cast<uint64_t>(o.row_bytes), o.row_digests.data());
    o.digest = kernels::wholeOfRowsCpu(o.row_digests.data(), o.row_digests.size());  // as the tracer
  }
  if (capture) {
    o.capture = bytes;
    o.capture_bytes = static_cast<int64_t>(bytes.size());
  }
  return o;
}

// How a synthetic GEMM's recorded D is summed: fp32 sequential in K, or `split` fp32 partial sums
// over equal slices of K added in slice order (a split-K kernel).
inline float dot(const float* a, const float* b, int64_t k, int split) {
  if (split <= 1) {
    float acc = 0.0f;
    for (int64_t q = 0; q < k; ++q) acc = acc + a[q] * b[q];
    return acc;
  }
  const int64_t slice = k / split;
  float total = 0.0f;
  for (int s = 0; s < split; ++s) {
    float acc = 0.0f;
    for (int64_t q = s * slice; q < (s + 1) * slice; ++q) acc = acc + a[q] * b[q];
    total = s == 0 ? acc : total + acc;
  }
  return total;
}

// One GEMM in cuBLAS terms: D(m x n) = op(A) op(B), A stored (trans_a ? k x m : m x k) with lda,
// B stored (trans_b ? n x k : k x n) with ldb, D m x n with ldd. Inputs bf16, D `d_dtype`.
struct GemmSpec {
  int64_t m = 64, n = 4, k = 64;
  bool trans_a = true, trans_b = false;
  int64_t lda = 64, ldb = 64, ldd = 64;
  db::DType d_dtype = db::DType::kF32;
  int split = 1;  // how the recorded D is summed (see dot())
  bool bias = false;  // a cuBLASLt epilogue's bias operand (slot 4, m bf16), not in the recorded D
  int32_t epilogue = -1;  // db::Gemm::epilogue (-1: unrecorded, as in traces from before it)
};

struct GemmData {
  Bytes a, b, d;  // extents as stored (column-major with ld)
};

// op(A)[i][q] and op(B)[q][j] as floats, from the stored extents.
inline float opA(const GemmSpec& s, const Bytes& a, int64_t i, int64_t q) {
  const int64_t idx = s.trans_a ? q + i * s.lda : i + q * s.lda;
  uint16_t h;
  std::memcpy(&h, a.data() + idx * 2, 2);
  return kernels::bf16ToFloat(h);
}
inline float opB(const GemmSpec& s, const Bytes& b, int64_t q, int64_t j) {
  const int64_t idx = s.trans_b ? j + q * s.ldb : q + j * s.ldb;
  uint16_t h;
  std::memcpy(&h, b.data() + idx * 2, 2);
  return kernels::bf16ToFloat(h);
}

// Fills D (stored, ld padding zero) from A and B with the spec's summation.
inline Bytes computeD(const GemmSpec& s, const Bytes& a, const Bytes& b) {
  const int64_t esize = db::dtypeSize(s.d_dtype);
  Bytes d(static_cast<size_t>(((s.n - 1) * s.ldd + s.m) * esize), 0);
  std::vector<float> row(static_cast<size_t>(s.k)), col(static_cast<size_t>(s.k));
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t q = 0; q < s.k; ++q) row[static_cast<size_t>(q)] = opA(s, a, i, q);
    for (int64_t j = 0; j < s.n; ++j) {
      for (int64_t q = 0; q < s.k; ++q) col[static_cast<size_t>(q)] = opB(s, b, q, j);
      const float v = dot(row.data(), col.data(), s.k, s.split);
      const kernels::DType t = s.d_dtype == db::DType::kF32 ? kernels::DType::kF32 : kernels::DType::kBF16;
      kernels::storeFromFloat(d.data(), static_cast<size_t>(i + j * s.ldd), t, v);
    }
  }
  return d;
}

inline int64_t extentElems(int64_t rows, int64_t cols, int64_t ld) { return (cols - 1) * ld + rows; }

// Appends the GEMM (A: weights, B: activations) with its operands: A and B captured when
// `capture`, D when `capture_d` (all fingerprinted).
// `algo`, when given, supplies the recorded algorithm fields (algo_id ... algo_source).
inline int64_t appendGemm(db::TraceWriter& w, const GemmSpec& s, const GemmData& data, bool capture,
                          bool capture_d = true, const db::Gemm* algo = nullptr) {
  db::Event e;
  e.kind = db::EventKind::kGemm;
  e.name = w.intern("cublasLtMatmul");
  e.stream = w.stream(0x10, 0);
  e.device = 0;
  db::Gemm g;
  g.api = w.intern("cublasLtMatmul");
  g.trans_a = s.trans_a;
  g.trans_b = s.trans_b;
  g.m = s.m;
  g.n = s.n;
  g.k = s.k;
  g.lda = s.lda;
  g.ldb = s.ldb;
  g.ldc = g.ldd = s.ldd;
  g.a_dtype = g.b_dtype = g.c_dtype = db::DType::kBF16;
  g.d_dtype = s.d_dtype;
  g.compute_type = w.intern("CUBLAS_COMPUTE_32F");
  g.algo_id = 6;
  g.tile = 15;
  g.split_k = s.split;
  g.reduction_scheme = s.split > 1 ? 1 : 0;
  g.stages = 8;
  g.algo_source = 2;
  if (algo != nullptr) {
    g.algo_id = algo->algo_id;
    g.tile = algo->tile;
    g.split_k = algo->split_k;
    g.reduction_scheme = algo->reduction_scheme;
    g.stages = algo->stages;
    g.swizzle = algo->swizzle;
    g.custom_option = algo->custom_option;
    g.algo_source = algo->algo_source;
  }
  g.epilogue = s.epilogue;
  g.a_addr = 0x7f0000100000;
  g.b_addr = 0x7f0000200000;
  g.c_addr = g.d_addr = 0x7f0000300000;
  const int64_t seq = *w.appendGemm(e, g);
  const int64_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
  const int64_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
  using db::OperandRole;
  auto add = [&](db::Operand o) {
    o.seq = seq;
    w.appendOperand(std::move(o));
  };
  add(columnMajor(w, 0, "A", OperandRole::kInput, db::DType::kBF16, a_rows, a_cols, s.lda, data.a,
                  capture, g.a_addr));
  add(columnMajor(w, 1, "B", OperandRole::kInput, db::DType::kBF16, b_rows, b_cols, s.ldb, data.b,
                  capture, g.b_addr));
  add(columnMajor(w, 3, "D", OperandRole::kOutput, s.d_dtype, s.m, s.n, s.ldd, data.d,
                  capture && capture_d, g.d_addr));
  if (s.bias) {
    add(buffer(w, 4, "bias", OperandRole::kInput, db::DType::kBF16, s.m, 0,
               Bytes(static_cast<size_t>(s.m) * 2), capture, 0x7f0000400000));
  }
  return seq;
}

inline int64_t appendKernel(db::TraceWriter& w, const char* name) {
  db::Event e;
  e.kind = db::EventKind::kKernel;
  e.name = w.intern(name);
  e.stream = w.stream(0x10, 0);
  e.device = 0;
  return *w.append(e);
}

// One rank's part of a collective with its send and recv buffers.
struct CollSpec {
  db::CollOp op = db::CollOp::kAllReduce;
  db::DType dtype = db::DType::kBF16;
  int64_t count = 0;      // per NCCL's count argument
  int64_t row_elems = 0;  // rows of the buffers (0: none)
  int64_t comm_id = 0x5eed;
  int64_t comm_seq = 0;
  int32_t rank = 0, nranks = 1;
};

inline int64_t appendCollective(db::TraceWriter& w, const CollSpec& s, const Bytes& send,
                                const Bytes& recv, bool capture) {
  db::Event e;
  e.kind = db::EventKind::kCollective;
  e.name = w.intern(db::collOpName(s.op));
  e.stream = w.stream(0x10, 0);
  e.device = 0;
  db::Collective c;
  c.op = s.op;
  c.dtype = s.dtype;
  c.count = s.count;
  c.redop = s.op == db::CollOp::kAllGather ? db::RedOp::kNone : db::RedOp::kSum;
  c.comm_id = s.comm_id;
  c.comm_rank = s.rank;
  c.comm_nranks = s.nranks;
  c.comm_seq = s.comm_seq;
  c.algo = w.intern("Ring");
  c.proto = w.intern("LL");
  c.channels = 2;
  c.send_addr = 0x7f0000400000;
  c.recv_addr = 0x7f0000500000;
  const int64_t seq = *w.appendCollective(e, c);
  const int64_t esize = db::dtypeSize(s.dtype);
  db::Operand so = buffer(w, 0, "send", db::OperandRole::kInput, s.dtype,
                          static_cast<int64_t>(send.size()) / esize, s.row_elems, send, capture,
                          c.send_addr);
  db::Operand ro = buffer(w, 1, "recv", db::OperandRole::kOutput, s.dtype,
                          static_cast<int64_t>(recv.size()) / esize, s.row_elems, recv, capture,
                          c.recv_addr);
  so.seq = ro.seq = seq;
  w.appendOperand(std::move(so));
  w.appendOperand(std::move(ro));
  return seq;
}

// Sum of per-rank buffers in a fixed order (the CPU twin of kernels/reduce.h).
inline Bytes reduceInOrder(const std::vector<Bytes>& sends, kernels::ReduceOrder order, int start,
                           kernels::DType dtype = kernels::DType::kBF16) {
  std::vector<const void*> in;
  for (const auto& s : sends) in.push_back(s.data());
  Bytes out(sends[0].size());
  (void)kernels::fixedOrderReduceCpu(in.data(), static_cast<int>(in.size()), out.data(),
                                     sends[0].size() / kernels::dtypeSize(dtype), dtype, order, start);
  return out;
}

// The committed toy TP step (see the top of this file) at `tokens` tokens, into `dir`.
// `request_rows` places the 4 request tokens of the bs4 run inside this run's rows.
struct ToyStep {
  int world = 3;
  int64_t hidden = 64, k = 64;
  int64_t tokens = 4;
  std::vector<int64_t> request_rows = {0, 1, 2, 3};
  int gemm_split = 2;                                      // recorded D's summation
  kernels::ReduceOrder order = kernels::ReduceOrder::kRing;  // recorded all-reduce order
  int order_start = 2;
  uint32_t seed = 20251129;
};

// One step's data: every rank's weights, activations, all-reduce inputs and recorded outputs.
struct ToyData {
  std::vector<Bytes> weights, activations, sends;
  Bytes recv;
  Bytes gather_part;
};

inline ToyData toyData(const ToyStep& t) {
  ToyData out;
  std::mt19937 rng(t.seed);
  // Shared across batch sizes: the weights (per rank), the request's activations and all-reduce
  // inputs (per rank); other tokens are fresh.
  for (int r = 0; r < t.world; ++r) out.weights.push_back(randomBf16(rng, t.hidden * t.k));
  Bytes request_act = randomBf16(rng, 4 * t.k);
  std::vector<Bytes> request_send;
  for (int r = 0; r < t.world; ++r) request_send.push_back(randomF32(rng, 4 * t.hidden));
  out.gather_part = randomBf16(rng, t.hidden);
  std::mt19937 other(t.seed + static_cast<uint32_t>(t.tokens));
  auto place = [&](const Bytes& request, Bytes all, int64_t row_bytes) {
    for (size_t i = 0; i < t.request_rows.size(); ++i) {
      std::memcpy(all.data() + t.request_rows[i] * row_bytes,
                  request.data() + static_cast<int64_t>(i) * row_bytes,
                  static_cast<size_t>(row_bytes));
    }
    return all;
  };
  for (int r = 0; r < t.world; ++r) {
    out.sends.push_back(place(request_send[static_cast<size_t>(r)],
                              randomF32(other, t.tokens * t.hidden), t.hidden * 4));
    out.activations.push_back(place(request_act, randomBf16(other, t.tokens * t.k), t.k * 2));
  }
  out.recv = reduceInOrder(out.sends, t.order, t.order_start, kernels::DType::kF32);
  return out;
}

// Appends one step (six events, see the top of this file) of rank `r`; `step` numbers the
// communicator calls.
inline void appendToyStep(db::TraceWriter& w, const ToyStep& t, const ToyData& data, int r,
                          int step) {
  appendKernel(w, "embedding");
  GemmSpec g;
  g.m = t.hidden;
  g.n = t.tokens;
  g.k = t.k;
  g.lda = t.k;
  g.ldb = t.k;
  g.ldd = t.hidden;
  g.split = t.gemm_split;
  GemmData gd{data.weights[static_cast<size_t>(r)], data.activations[static_cast<size_t>(r)], {}};
  gd.d = computeD(g, gd.a, gd.b);
  appendGemm(w, g, gd, true);
  CollSpec c;
  c.dtype = db::DType::kF32;
  c.count = t.tokens * t.hidden;
  c.row_elems = t.hidden;
  c.rank = r;
  c.nranks = t.world;
  c.comm_seq = 2 * step;
  appendCollective(w, c, data.sends[static_cast<size_t>(r)], data.recv, true);
  appendKernel(w, "rmsnorm");
  appendGemm(w, g, gd, false);
  CollSpec gather = c;
  gather.op = db::CollOp::kAllGather;
  gather.count = t.hidden;
  gather.row_elems = 0;
  gather.comm_seq = 2 * step + 1;
  gather.dtype = db::DType::kBF16;
  Bytes all(static_cast<size_t>(t.hidden * t.world * 2));
  appendCollective(w, gather, data.gather_part, all, false);
}

// A run of the toy steps in order (the committed one: toyBs4() then toyBs8()), into `dir`.
inline Status writeToyRun(const std::string& dir, const std::vector<ToyStep>& steps) {
  const ToyStep& t = steps.front();
  std::vector<ToyData> data;
  for (const auto& s : steps) data.push_back(toyData(s));
  db::RunManifest manifest;
  manifest.tool_version = "synthetic";
  manifest.command = {"python", "toy_tp.py", "--tokens", "4,8"};
  manifest.host = "synthetic";
  manifest.start_time_ns = 1'764'400'000'000'000'000;
  manifest.end_time_ns = manifest.start_time_ns + 1'000'000'000;
  manifest.exit_code = 0;
  manifest.options = {{"capture", "full"}};
  DETRACE_RETURN_IF_ERROR(db::writeManifest(dir, manifest));
  for (int r = 0; r < t.world; ++r) {
    db::WriterOptions options;
    options.overwrite = true;
    options.policy = db::OverflowPolicy::kBlock;
    DETRACE_ASSIGN_OR_RETURN(auto w, db::TraceWriter::create(
                                         fmt::format("{}/proc-{}.dtrace", dir, 100 + r), options));
    w->setRank({r, t.world, r, r, 100 + r, "synthetic", "synthetic GPU", ""});
    for (size_t k = 0; k < steps.size(); ++k) {
      appendToyStep(*w, steps[k], data[k], r, static_cast<int>(k));
    }
    DETRACE_RETURN_IF_ERROR(w->close());
  }
  return Status::ok();
}

// The two steps of the committed run.
inline ToyStep toyBs4() { return ToyStep{}; }
inline ToyStep toyBs8() {
  ToyStep t;
  t.tokens = 8;
  t.request_rows = {5, 2, 7, 0};
  t.gemm_split = 1;
  t.order = kernels::ReduceOrder::kReversed;
  t.order_start = 0;
  return t;
}

}  // namespace detrace::testing::synth
