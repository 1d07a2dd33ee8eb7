// Helpers for the GUI suites: the committed real runs, synthetic runs written with TraceWriter, and
// waiting for a window's background work.
#pragma once

#include <QSignalSpy>
#include <QString>
#include <QTest>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "detrace/db/writer.h"

#include "../db/test_util.h"
#include "main_window.h"

namespace detrace::gui::testing {

inline QString runPath(const char* name) {
  return QString("%1/runs/%2").arg(DETRACE_TEST_DATA_DIR, name);
}

// Opens runs and waits until the analysis is shown (and, optionally, the timeline and tensors).
inline bool openAndWait(MainWindow& w, const QStringList& paths, bool plots = false) {
  QSignalSpy shown(&w, &MainWindow::analysisShown);
  QSignalSpy ready(&w, &MainWindow::analysisReady);
  w.openRuns(paths);
  if (!shown.wait(30000)) return false;
  if (!plots) return true;
  return ready.count() > 0 || ready.wait(30000);
}

// One kernel event on stream `stream` at time t (ns).
inline db::Event kernelAt(int64_t name, int64_t stream, int64_t t, int64_t parent = -1) {
  db::Event e;
  e.kind = db::EventKind::kKernel;
  e.name = name;
  e.stream = stream;
  e.cpu_ns = t;
  e.gpu_start_ns = t + 100;
  e.gpu_end_ns = t + 600;
  e.parent_seq = parent;
  return e;
}

// A bf16 value's bits from a float (truncation is enough for tests).
inline uint16_t bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

// A run with one GEMM whose output D (rows x cols bf16) was captured: `out` holds its values.
// The GEMM's inputs are identical in every run written by this function.
inline void writeCapturedRun(const std::string& dir, int64_t rows, int64_t cols,
                             const std::vector<uint16_t>& out) {
  std::filesystem::create_directories(dir);
  db::WriterOptions o;
  o.overwrite = true;
  o.policy = db::OverflowPolicy::kBlock;
  auto w = db::TraceWriter::create(dir + "/proc-1.dtrace", o);
  if (!w.isOk()) throw std::runtime_error(w.status().message());
  (*w)->setRank({0, 1, 0, 0, 1, "test", "NVIDIA H200", ""});
  int64_t stream = (*w)->stream(7, 0);
  int64_t k = (*w)->intern("void fill_kernel<float>(float*)");
  int64_t api = (*w)->intern("cublasLtMatmul");
  int64_t gk = (*w)->intern("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_TNT");
  int64_t t = 1000000;
  for (int i = 0; i < 3; ++i) (void)(*w)->append(kernelAt(k, stream, t += 1000));
  db::Event ge;
  ge.kind = db::EventKind::kGemm;
  ge.name = api;
  ge.stream = stream;
  ge.cpu_ns = t += 1000;
  db::Gemm g;
  g.api = api;
  g.m = cols;
  g.n = rows;
  g.k = 16;
  g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
  g.algo_id = 6;
  auto seq = (*w)->appendGemm(ge, g);
  (void)(*w)->append(kernelAt(gk, stream, t += 1000, *seq));
  const int64_t row_bytes = cols * 2;
  for (int slot = 0; slot < 3; ++slot) {
    db::Operand op;
    op.seq = *seq;
    op.slot = slot;
    op.name = (*w)->intern(slot == 0 ? "A" : slot == 1 ? "B" : "D");
    op.role = slot == 2 ? db::OperandRole::kOutput : db::OperandRole::kInput;
    op.dtype = db::DType::kBF16;
    op.shape = {rows, cols};
    op.rows = rows;
    op.row_bytes = row_bytes;
    op.row_stride = row_bytes;
    op.bytes = rows * row_bytes;
    std::vector<uint16_t> values =
        slot == 2 ? out
                  : std::vector<uint16_t>(static_cast<size_t>(rows * cols), bf16(1.0f + slot));
    op.capture.resize(values.size() * 2);
    std::memcpy(op.capture.data(), values.data(), op.capture.size());
    op.capture_bytes = static_cast<int64_t>(op.capture.size());
    op.has_digest = true;
    op.digest = 0;
    for (int64_t r = 0; r < rows; ++r) {
      uint64_t h = 1469598103934665603ULL + static_cast<uint64_t>(slot);
      for (int64_t c = 0; c < cols; ++c)
        h = (h ^ values[static_cast<size_t>(r * cols + c)]) * 1099511628211ULL;
      op.row_digests.push_back(h);
      op.digest = op.digest * 31 + h;
    }
    if (!(*w)->appendOperand(std::move(op))) throw std::runtime_error("operand dropped");
  }
  for (int i = 0; i < 3; ++i) (void)(*w)->append(kernelAt(k, stream, t += 1000));
  if (!(*w)->close().isOk()) throw std::runtime_error("close failed");
}

}  // namespace detrace::gui::testing
