// Fake launches, GPU records and library ops for the reorder buffer's CPU tests.
#pragma once

#include <cstdint>

#include "detrace/tracer/reorder_buffer.h"

namespace detrace::testing {

// A runtime kernel launch seen at API time.
inline tracer::ApiLaunch launch(uint64_t corr, int64_t cpu_ns, int64_t stream = 1) {
  tracer::ApiLaunch l;
  l.correlation_id = corr;
  l.api = db::LaunchApi::kRuntime;
  l.cpu_ns = cpu_ns;
  l.stream = stream;
  l.device = 0;
  return l;
}

// Its kernel's GPU record: started at `start`, ended 10 ns later.
inline tracer::Activity kernel(uint64_t corr, int64_t start, int64_t name = 7) {
  tracer::Activity a;
  a.correlation_id = corr;
  a.kind = db::EventKind::kKernel;
  a.name = name;
  a.device = 0;
  a.gpu_start_ns = start;
  a.gpu_end_ns = start + 10;
  a.has_launch = true;
  a.launch.grid = {4, 2, 1};
  a.launch.block = {128, 1, 1};
  a.launch.registers = 32;
  return a;
}

// A GEMM recorded at API time.
inline tracer::LibraryOp gemm(int64_t cpu_ns) {
  tracer::LibraryOp op;
  op.event.kind = db::EventKind::kGemm;
  op.event.cpu_ns = cpu_ns;
  db::Gemm g;
  g.m = 64;
  op.detail = g;
  return op;
}

}  // namespace detrace::testing
