// A generated run of realistic shape for the CPU benchmarks (bench_diff, bench_gui_first_screen):
// one rank; per GEMM, six elementwise kernels, the GEMM (4096 x 8 x 4096, bf16) with three
// fingerprinted operands of 8 rows each, and its kernel. Two runs written with different `plant`
// are identical but for the output of GEMM number `plant` (-1: none).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detrace/db/writer.h"

namespace detrace::bench {

struct RunShape {
  const char* gpu_name = "GPU";
  int streams = 1;              // kernels alternate over this many streams (1 or 2)
  int64_t kernel_ns = 5;        // each kernel's GPU duration
};

inline uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = (a ^ 0x9E3779B97F4A7C15ULL) * (b | 1);
  return x ^ (x >> 31);
}

// Writes DIR/proc-1.dtrace with about `events` events; exits with status 2 if it cannot.
inline void writeGeneratedRun(const std::string& dir, int64_t events, int64_t plant, const RunShape& shape = {}) {
  std::filesystem::create_directories(dir);
  db::WriterOptions o;
  o.overwrite = true;
  o.policy = db::OverflowPolicy::kBlock;
  auto w = db::TraceWriter::create(dir + "/proc-1.dtrace", o);
  if (!w.isOk()) {
    fmt::print(stderr, "{}\n", w.status().message());
    std::exit(2);
  }
  (*w)->setRank({0, 1, 0, 0, 1, "bench", shape.gpu_name, ""});
  std::vector<int64_t> names;
  for (int i = 0; i < 40; ++i) {
    names.push_back((*w)->intern(fmt::format("void elementwise_kernel_{}<bf16, 4>(float*, int)", i)));
  }
  int64_t gemm_kernel = (*w)->intern("nvjet_sm90_tst_128x64_64x8_2x1_v_bz_TNT");
  int64_t api = (*w)->intern("cublasLtMatmul");
  int64_t streams[2] = {(*w)->stream(7, 0), (*w)->stream(9, 0)};
  uint64_t h = 42;
  int64_t n = 0, gemm_index = 0;
  auto kernel = [&](int64_t name, int64_t parent, int64_t stream) {
    db::Event e;
    e.kind = db::EventKind::kKernel;
    e.name = name;
    e.stream = stream;
    e.cpu_ns = 1000 * n;
    e.gpu_start_ns = e.cpu_ns + 10;
    e.gpu_end_ns = e.gpu_start_ns + shape.kernel_ns;
    e.parent_seq = parent;
    e.has_launch = true;
    e.launch.grid = {128, 1, 1};
    e.launch.block = {256, 1, 1};
    (void)(*w)->append(e);
    ++n;
  };
  while (n < events) {
    for (int i = 0; i < 6; ++i) {
      kernel(names[static_cast<size_t>((n + i) % 40)], -1, streams[shape.streams > 1 ? i % 2 : 0]);
    }
    db::Event ge;
    ge.kind = db::EventKind::kGemm;
    ge.name = api;
    ge.stream = streams[0];
    ge.cpu_ns = 1000 * n;
    db::Gemm g;
    g.api = api;
    g.m = 4096;
    g.n = 8;
    g.k = 4096;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.algo_id = 66;
    g.tile = 24;
    g.split_k = 1;
    auto seq = (*w)->appendGemm(ge, g);
    ++n;
    for (int slot = 0; slot < 3; ++slot) {
      db::Operand op;
      op.seq = *seq;
      op.slot = slot;
      op.role = slot == 2 ? db::OperandRole::kOutput : db::OperandRole::kInput;
      op.has_digest = true;
      uint64_t out = mix(h, static_cast<uint64_t>(gemm_index));
      if (slot == 2 && gemm_index == plant) out ^= 1;
      op.digest = slot == 2 ? out : mix(h, static_cast<uint64_t>(slot));
      op.rows = 8;
      op.row_bytes = 8192;
      for (int r = 0; r < 8; ++r) op.row_digests.push_back(mix(op.digest, static_cast<uint64_t>(r)));
      (void)(*w)->appendOperand(std::move(op));
      if (slot == 2) h = out;
    }
    ++gemm_index;
    kernel(gemm_kernel, *seq, streams[0]);
  }
  if (!(*w)->close().isOk()) std::exit(2);
}

}  // namespace detrace::bench
