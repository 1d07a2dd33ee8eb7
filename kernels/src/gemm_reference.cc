// fp64 CPU twin of the GEMMs (gemm_reference.h). Inputs are widened to float once (bf16 and fp16
// values are exact in float) and every product and sum is done in double, in K order, so the
// result does not depend on the blocking or on the number of threads.
#include "detrace/kernels/gemm_reference.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace detrace::kernels {
namespace {

constexpr int64_t kBlock = 4;     // 4×4 register block over (i, j)
constexpr int64_t kKChunk = 256;  // K is walked in chunks so a block's rows stay in L1

std::vector<float> widen(DType type, std::span<const uint16_t> x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = type == DType::kBF16 ? bf16ToFloat(x[i]) : halfToFloat(x[i]);
  }
  return out;
}

// out[i][j] for i in [0, m), j in [j_begin, j_end), K chunk [p0, p1): continues the running sums.
void accumulateChunk(const float* a, const float* b, double* out, int64_t m, int64_t n, int64_t k,
                     int64_t j_begin, int64_t j_end, int64_t p0, int64_t p1) {
  for (int64_t i0 = 0; i0 < m; i0 += kBlock) {
    for (int64_t j0 = j_begin; j0 < j_end; j0 += kBlock) {
      const float* ar[kBlock];
      const float* br[kBlock];
      for (int64_t t = 0; t < kBlock; ++t) {
        ar[t] = a + std::min(i0 + t, m - 1) * k;       // clamped: extra rows are computed
        br[t] = b + std::min(j0 + t, j_end - 1) * k;   // and thrown away
      }
      double acc[kBlock][kBlock];
      for (int64_t r = 0; r < kBlock; ++r) {
        for (int64_t c = 0; c < kBlock; ++c) {
          const int64_t i = std::min(i0 + r, m - 1);
          const int64_t j = std::min(j0 + c, j_end - 1);
          acc[r][c] = p0 == 0 ? 0.0 : out[i * n + j];
        }
      }
      for (int64_t p = p0; p < p1; ++p) {
        double av[kBlock];
        double bv[kBlock];
        for (int64_t t = 0; t < kBlock; ++t) {
          av[t] = static_cast<double>(ar[t][p]);
          bv[t] = static_cast<double>(br[t][p]);
        }
        for (int64_t r = 0; r < kBlock; ++r) {
          for (int64_t c = 0; c < kBlock; ++c) acc[r][c] += av[r] * bv[c];
        }
      }
      for (int64_t r = 0; r < kBlock && i0 + r < m; ++r) {
        for (int64_t c = 0; c < kBlock && j0 + c < j_end; ++c) out[(i0 + r) * n + j0 + c] = acc[r][c];
      }
    }
  }
}

}  // namespace

std::vector<double> referenceGemmF64(int64_t m, int64_t n, int64_t k, DType in_type,
                                     std::span<const uint16_t> a, std::span<const uint16_t> b,
                                     int threads) {
  std::vector<double> out(static_cast<size_t>(m * n), 0.0);
  if (m <= 0 || n <= 0 || k <= 0) return out;
  const std::vector<float> af = widen(in_type, a.first(static_cast<size_t>(m * k)));
  const std::vector<float> bf = widen(in_type, b.first(static_cast<size_t>(n * k)));
  int64_t workers = threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency());
  workers = std::clamp<int64_t>(workers, 1, (n + kBlock - 1) / kBlock);
  // Each worker owns a contiguous range of B rows (columns of D) and walks all of A.
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < workers; ++w) {
    const int64_t j_begin = std::min(n, blocks * w / workers * kBlock);
    const int64_t j_end = std::min(n, blocks * (w + 1) / workers * kBlock);
    if (j_begin >= j_end) continue;
    pool.emplace_back([&, j_begin, j_end] {
      for (int64_t p0 = 0; p0 < k; p0 += kKChunk) {
        accumulateChunk(af.data(), bf.data(), out.data(), m, n, k, j_begin, j_end, p0,
                        std::min(k, p0 + kKChunk));
      }
    });
  }
  for (auto& t : pool) t.join();
  return out;
}

GemmError compareToReference(DType out_type, const void* d, std::span<const double> ref) {
  GemmError e;
  if (ref.empty()) return e;
  double sum_sq = 0.0;
  for (const double r : ref) sum_sq += r * r;
  const double floor = 1e-2 * std::sqrt(sum_sq / static_cast<double>(ref.size()));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = static_cast<double>(loadAsFloat(d, i, out_type));
    if (!std::isfinite(v)) {
      ++e.nonfinite;
      if (e.worst_index < 0) e.worst_index = static_cast<int64_t>(i);
      continue;
    }
    const double abs_err = std::fabs(v - ref[i]);
    const double rel = abs_err / std::max(std::fabs(ref[i]), floor);
    e.max_abs = std::max(e.max_abs, abs_err);
    if (rel > e.max_rel) {
      e.max_rel = rel;
      if (e.nonfinite == 0) e.worst_index = static_cast<int64_t>(i);
    }
  }
  return e;
}

}  // namespace detrace::kernels
