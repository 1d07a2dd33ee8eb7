// bench_kernels: throughput of the non-GEMM kernels on one GPU, against the device-to-device copy
// measured in the same run (the ceiling, counting bytes read + written).
//
// Method: CUDA events around a batch of K back-to-back calls on one stream (so launch cost is
// included, as a tracer would pay it), 3 warm-up batches, the median over R batches. Each call in
// a batch reads a different buffer from a rotation whose footprint is at least 4x the 60 MB L2, so
// small sizes are not served from L2. Prints one table at the end.
//
//   bench_kernels            everything
//   bench_kernels --digest   the copy ceiling and the digests only (whole buffers, rows of several
//                            sizes, unaligned bases)
//   bench_kernels --profile  one launch of each kernel shape, for a profiler
//
// Above 32 MiB a batch is one call (the events then also time the gap before the call and after
// it). `--digest` adds rows "..., 4 back-to-back" at 256 MiB and 1 GiB, timed over batches of 4
// calls rotated over distinct buffers where the pool holds them, a read ceiling (the plainest
// kernel that reads every byte with 16-byte loads, read_ceiling.cu) timed both ways, and one
// 256 MiB buffer through digestMany (the entry point the tracer uses).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "detrace/kernels/digest.h"
#include "detrace/kernels/reduce.h"
#include "detrace/kernels/rmsnorm.h"
#include "read_ceiling.h"

namespace dk = detrace::kernels;

namespace {

constexpr uint64_t kKiB = 1024, kMiB = kKiB * kKiB, kGiB = kMiB * kKiB;
constexpr uint64_t kRotationFootprint = 256 * kMiB;  // >= 4 x 60 MB of L2
constexpr uint64_t kPoolBytes = kGiB + 64 * kMiB;
constexpr uint64_t kRowOutBytes = 16 * kMiB;  // 2 Mi row digests: 1 GiB in rows of 512 bytes
constexpr uint64_t kRowSlots = 4096;          // workspace of split rows (>= 1 GiB / 256 KiB)

#define CHECK_CUDA(call)                                                                  \
  do {                                                                                    \
    const cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "bench_kernels: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

#define CHECK_STATUS(expr)                                                          \
  do {                                                                              \
    const detrace::Status s_ = (expr);                                              \
    if (!s_.isOk()) {                                                               \
      std::fprintf(stderr, "bench_kernels: %s failed: %s\n", #expr, s_.message().c_str()); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

struct Row {
  std::string kernel;
  std::string size;
  double time_us;
  double gbps;
  double pct;
};

std::string human(uint64_t bytes) {
  char buf[32];
  if (bytes >= kGiB && bytes % kGiB == 0) {
    std::snprintf(buf, sizeof buf, "%llu GiB", static_cast<unsigned long long>(bytes / kGiB));
  } else if (bytes >= kMiB && bytes % kMiB == 0) {
    std::snprintf(buf, sizeof buf, "%llu MiB", static_cast<unsigned long long>(bytes / kMiB));
  } else {
    std::snprintf(buf, sizeof buf, "%llu KiB", static_cast<unsigned long long>(bytes / kKiB));
  }
  return buf;
}

class Bench {
 public:
  Bench() {
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaFree(nullptr));
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreate(&start_));
    CHECK_CUDA(cudaEventCreate(&stop_));
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&pool_), kPoolBytes));
    CHECK_CUDA(cudaMemset(pool_, 0x3c, kPoolBytes));  // finite bf16/fp16/fp32 values
    CHECK_CUDA(cudaMalloc(&copy_dst_, 512 * kMiB));
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&slots_), 4096 * sizeof(dk::DigestSlot)));
    CHECK_CUDA(cudaMemset(slots_, 0, 4096 * sizeof(dk::DigestSlot)));
    CHECK_CUDA(cudaMalloc(&row_out_, kRowOutBytes));
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&row_slots_),
                          kRowSlots * sizeof(dk::DigestSlot)));
    CHECK_CUDA(cudaMemset(row_slots_, 0, kRowSlots * sizeof(dk::DigestSlot)));
    auto d = dk::Digester::create();
    if (!d.isOk()) {
      std::fprintf(stderr, "bench_kernels: %s\n", d.status().message().c_str());
      std::exit(1);
    }
    digester_.emplace_back(std::move(d).value());
  }

  // Median microseconds per call of fn(i), i the call's index in the rotation. A batch holds at
  // least min_batch calls; with min_batch > 1 the rotation spans min_batch buffers where the pool
  // holds them (i * per_call_bytes + per_call_bytes <= kPoolBytes for every i fn is given).
  double time(const std::function<void(uint64_t)>& fn, uint64_t per_call_bytes, int reps = 15,
              uint64_t min_batch = 1) {
    const uint64_t per_call = std::max<uint64_t>(per_call_bytes, 1);
    const uint64_t footprint = std::max(kRotationFootprint, per_call * min_batch);
    const uint64_t rotation = std::clamp<uint64_t>(footprint / per_call, 1,
                                                   std::max<uint64_t>(1, kPoolBytes / per_call));
    if (min_batch > 200) min_batch = 200;  // std::clamp needs lo <= hi
    const uint64_t batch = std::clamp<uint64_t>(64 * kMiB / per_call, min_batch, 200);
    uint64_t call = 0;
    auto run_batch = [&] {
      for (uint64_t k = 0; k < batch; ++k) fn(call++ % rotation);
    };
    for (int w = 0; w < 3; ++w) run_batch();
    std::vector<double> us;
    for (int r = 0; r < reps; ++r) {
      // A primer call, not timed, keeps the GPU busy while the timed batch is enqueued, so the
      // batch's time does not include the GPU waiting for the host to submit its first call.
      fn(call++ % rotation);
      CHECK_CUDA(cudaEventRecord(start_, stream_));
      run_batch();
      CHECK_CUDA(cudaEventRecord(stop_, stream_));
      CHECK_CUDA(cudaEventSynchronize(stop_));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
      us.push_back(static_cast<double>(ms) * 1000.0 / static_cast<double>(batch));
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  }

  void add(const std::string& kernel, const std::string& size, double us, uint64_t bytes) {
    const double gbps = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
    rows_.push_back({kernel, size, us, gbps, ceiling_gbps_ > 0 ? 100.0 * gbps / ceiling_gbps_ : 100.0});
  }

  void copyCeiling() {
    const uint64_t bytes = 512 * kMiB;
    const double us = time([&](uint64_t) {
      CHECK_CUDA(cudaMemcpyAsync(copy_dst_, pool_, bytes, cudaMemcpyDeviceToDevice, stream_));
    }, 2 * bytes, 9);
    ceiling_gbps_ = 2.0 * static_cast<double>(bytes) / (us * 1e-6) / 1e9;
    add("copy d2d (r+w)", human(bytes), us, 2 * bytes);
    // A copy at 16 MiB too, rotated like the digests, for the small-size comparison.
    const uint64_t small = 16 * kMiB;
    const double us16 = time([&](uint64_t i) {
      CHECK_CUDA(cudaMemcpyAsync(static_cast<char*>(copy_dst_) + (i % 16) * small,
                                 pool_ + i * small, small, cudaMemcpyDeviceToDevice, stream_));
    }, 2 * small);
    add("copy d2d (r+w)", human(small), us16, 2 * small);
  }

  void digests() {
    for (uint64_t size : {4 * kKiB, 64 * kKiB, 1 * kMiB, 16 * kMiB, 256 * kMiB, 1 * kGiB}) {
      const uint64_t stride = (size + 255) / 256 * 256;
      const double us = time([&](uint64_t i) {
        CHECK_STATUS(digester_[0].digest(reinterpret_cast<CUdeviceptr>(pool_ + i * stride), size,
                                         slots_, stream_));
      }, stride, size >= 256 * kMiB ? 9 : 15);
      add("digest", human(size), us, size);
    }
    // Per-row digests at the same total sizes: rows of 8 KiB (the row size the tables compare),
    // and in --digest runs rows of 1 KiB (8 rows per warp), 64 KiB (a block per row) and 1 MiB
    // (split rows: several blocks per row, atomics in a workspace).
    std::vector<uint64_t> row_sizes = {8 * kKiB};
    if (digest_only_) row_sizes = {1 * kKiB, 8 * kKiB, 64 * kKiB, 1 * kMiB};
    for (uint64_t row_bytes : row_sizes) {
      for (uint64_t size : {4 * kKiB, 64 * kKiB, 1 * kMiB, 16 * kMiB, 256 * kMiB, 1 * kGiB}) {
        if (size < row_bytes) continue;
        const auto rows = static_cast<uint32_t>(size / row_bytes);
        const bool split = row_bytes > dk::kDigestRowBytesWithoutWorkspace;
        if (rows * 8ull > kRowOutBytes || (split && rows > kRowSlots)) continue;
        dk::DigestSlot* ws = split ? row_slots_ : nullptr;
        const double us = time([&](uint64_t i) {
          CHECK_STATUS(digester_[0].digestRows(reinterpret_cast<CUdeviceptr>(pool_ + i * size),
                                               rows, row_bytes, row_bytes,
                                               static_cast<uint64_t*>(row_out_), ws, stream_));
        }, size, size >= 256 * kMiB ? 9 : 15);
        add("digest rows of " + human(row_bytes), human(size), us, size);
      }
    }
    if (!digest_only_) return;
    // A decode step's GEMM as the tracer digests it: the weight (1536 rows of 1 KiB), the token's
    // activations (1 KiB) and its output (3 KiB), one launch each against one digestMany.
    {
      const uint64_t w_bytes = 1536 * kKiB, op_bytes = w_bytes + 4 * kKiB;
      auto* out = static_cast<uint64_t*>(row_out_);
      auto requests = [&](uint64_t i) {
        const unsigned char* base = pool_ + i * (op_bytes + 256);
        std::array<dk::DigestRequest, 3> r{};
        r[0].base = reinterpret_cast<CUdeviceptr>(base);
        r[0].rows = 1536;
        r[0].row_bytes = r[0].row_stride = kKiB;
        r[0].out = out;
        r[1].base = reinterpret_cast<CUdeviceptr>(base + w_bytes);
        r[1].bytes = kKiB;
        r[1].slot = row_slots_;
        r[1].out = out + 1536;
        r[2].base = reinterpret_cast<CUdeviceptr>(base + w_bytes + kKiB);
        r[2].bytes = 3 * kKiB;
        r[2].slot = row_slots_ + 1;
        r[2].out = out + 1537;
        return r;
      };
      const double one_by_one = time([&](uint64_t i) {
        const auto r = requests(i);
        CHECK_STATUS(digester_[0].digestRows(r[0].base, r[0].rows, r[0].row_bytes, r[0].row_stride,
                                             r[0].out, nullptr, stream_));
        CHECK_STATUS(digester_[0].digest(r[1].base, r[1].bytes, r[1].slot, stream_, r[1].out));
        CHECK_STATUS(digester_[0].digest(r[2].base, r[2].bytes, r[2].slot, stream_, r[2].out));
      }, op_bytes);
      add("GEMM operands, 3 launches", human(op_bytes), one_by_one, op_bytes);
      const double many = time([&](uint64_t i) {
        const auto r = requests(i);
        CHECK_STATUS(digester_[0].digestMany(r.data(), 3, stream_));
      }, op_bytes);
      add("GEMM operands, digestMany", human(op_bytes), many, op_bytes);
    }
    // Large sizes again in batches of 4 back-to-back calls, and the read ceiling both ways.
    for (uint64_t size : {256 * kMiB, 1 * kGiB}) {
      const double us = time([&](uint64_t i) {
        CHECK_STATUS(digester_[0].digest(reinterpret_cast<CUdeviceptr>(pool_ + i * size), size,
                                         slots_, stream_));
      }, size, 9, 4);
      add("digest, 4 back-to-back", human(size), us, size);
    }
    {  // the tracer's entry point: one whole buffer through digestMany (the _many kernels)
      const uint64_t size = 256 * kMiB;
      const double us = time([&](uint64_t i) {
        dk::DigestRequest r{};
        r.base = reinterpret_cast<CUdeviceptr>(pool_ + i * size);
        r.bytes = size;
        r.slot = slots_;
        CHECK_STATUS(digester_[0].digestMany(&r, 1, stream_));
      }, size, 9);
      add("digest via digestMany", human(size), us, size);
    }
    readCeiling();
    // Unaligned bases take the 4-byte and the byte-aligned kernels.
    for (uint64_t offset : {4, 1}) {
      for (uint64_t size : {64 * kKiB, 16 * kMiB, 256 * kMiB}) {
        const uint64_t stride = (size + 255) / 256 * 256 + 256;
        const double us = time([&](uint64_t i) {
          CHECK_STATUS(digester_[0].digest(
              reinterpret_cast<CUdeviceptr>(pool_ + i * stride + offset), size, slots_, stream_));
        }, stride, size >= 256 * kMiB ? 9 : 15);
        add("digest, base + " + std::to_string(offset), human(size), us, size);
      }
    }
  }

  void reductions() {
    const uint64_t per_rank = 64 * kMiB;
    const size_t count = per_rank / 2;
    for (int n : {2, 4, 8}) {
      const uint64_t set_bytes = (n + 1) * per_rank;
      const uint64_t sets = std::max<uint64_t>(1, kPoolBytes / set_bytes);
      for (dk::ReduceOrder order : {dk::ReduceOrder::kRankOrder, dk::ReduceOrder::kTree}) {
        uint64_t calls = 0;  // own rotation over whole sets (time()'s is per call footprint)
        const double us = time([&](uint64_t) {
          unsigned char* base = pool_ + (calls++ % sets) * set_bytes;
          const void* in[8];
          for (int k = 0; k < n; ++k) in[k] = base + k * per_rank;
          CHECK_STATUS(dk::fixedOrderReduce(in, n, base + n * per_rank, count, dk::DType::kBF16,
                                            order, 0, stream_));
        }, set_bytes, 9);
        add(std::string("reduce ") + dk::reduceOrderName(order) + " N=" + std::to_string(n) +
                " bf16",
            "64 MiB/rank", us, set_bytes);
      }
    }
    const int n = 8;
    const uint64_t set_bytes = (n + 1) * per_rank;
    const double us = time([&](uint64_t) {
      const void* in[8];
      for (int k = 0; k < n; ++k) in[k] = pool_ + k * per_rank;
      CHECK_STATUS(dk::planted_racyReduce(in, n, pool_ + n * per_rank, count, dk::DType::kBF16,
                                          stream_));
    }, set_bytes, 5);
    add("planted_racyReduce N=8 bf16", "64 MiB/rank", us, set_bytes);
  }

  void rmsnorms() {
    const int64_t rows = 4096, hidden = 8192;
    const uint64_t tensor = static_cast<uint64_t>(rows * hidden) * 2;  // 64 MiB
    unsigned char* w = pool_ + kPoolBytes - 64 * kKiB;
    const uint64_t sets = 3;  // x, y (and residual) per set; 3 x 192 MiB rotated
    auto at = [&](uint64_t i, int k) { return pool_ + (i % sets) * 3 * tensor + k * tensor; };
    double us = time([&](uint64_t i) {
      CHECK_STATUS(dk::rmsNorm(at(i, 0), w, at(i, 1), rows, hidden, 1e-6f, dk::DType::kBF16, stream_));
    }, 2 * tensor, 11);
    add("rmsnorm bf16", "4096x8192", us, 2 * tensor);
    us = time([&](uint64_t i) {
      CHECK_STATUS(dk::rmsNormAddResidual(at(i, 0), at(i, 2), w, at(i, 1), rows, hidden, 1e-6f,
                                          dk::DType::kBF16, stream_));
    }, 4 * tensor, 11);
    add("rmsnorm+residual bf16", "4096x8192", us, 4 * tensor);
    us = time([&](uint64_t i) {
      CHECK_STATUS(dk::planted_batchVariantRmsNorm(at(i, 0), w, at(i, 1), rows, hidden, 1e-6f,
                                                   dk::DType::kBF16, stream_));
    }, 2 * tensor, 11);
    add("planted_batchVariantRmsNorm bf16", "4096x8192", us, 2 * tensor);
  }

  // Where the time of a small digest goes: the host's enqueue cost per call, and the GPU's time per
  // kernel when calls are queued behind a long copy (so the GPU never waits for the host).
  void diagnostics() {
    std::printf("digest kernel grid cap (resident 256-thread blocks): %d\n",
                digester_[0].gridCap());
    for (uint64_t size : {4 * kKiB, 64 * kKiB, 16 * kMiB}) {
      const int calls = 20;
      auto enqueue = [&](int i) {
        CHECK_STATUS(digester_[0].digest(reinterpret_cast<CUdeviceptr>(pool_ + i * size), size,
                                         slots_, stream_));
      };
      for (int i = 0; i < calls; ++i) enqueue(i);
      CHECK_CUDA(cudaStreamSynchronize(stream_));
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) enqueue(i);
      const auto t1 = std::chrono::steady_clock::now();
      CHECK_CUDA(cudaStreamSynchronize(stream_));
      const double host_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
      std::vector<double> gpu;
      for (int r = 0; r < 7; ++r) {
        CHECK_CUDA(cudaMemcpyAsync(copy_dst_, pool_, 512 * kMiB, cudaMemcpyDeviceToDevice, stream_));
        CHECK_CUDA(cudaEventRecord(start_, stream_));
        for (int i = 0; i < calls; ++i) enqueue(i);
        CHECK_CUDA(cudaEventRecord(stop_, stream_));
        CHECK_CUDA(cudaEventSynchronize(stop_));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
        gpu.push_back(static_cast<double>(ms) * 1000.0 / calls);
      }
      std::sort(gpu.begin(), gpu.end());
      std::printf("digest %-8s host enqueue %6.2f us/call, GPU %7.2f us/kernel (queued)\n",
                  human(size).c_str(), host_us, gpu[gpu.size() / 2]);
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) CHECK_CUDA(cudaMemsetAsync(copy_dst_, i, 4096, stream_));
    const auto t1 = std::chrono::steady_clock::now();
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    std::printf("reference: cudaMemsetAsync 4 KiB host enqueue %.2f us/call\n",
                std::chrono::duration<double, std::micro>(t1 - t0).count() / 20);
  }

  // The plainest full read (read_ceiling.cu) at the digest's sizes, batched like the digest rows
  // above (one call per batch above 32 MiB), and in batches of at least 4 (at 16 MiB both are 4).
  void readCeiling() {
    int sms = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int blocks = sms * 8;  // 2048 threads per SM
    auto* sink = static_cast<unsigned int*>(row_out_);  // blocks words; never written
    for (uint64_t min_batch : {uint64_t{1}, uint64_t{4}}) {
      for (uint64_t size : {16 * kMiB, 256 * kMiB, 1 * kGiB}) {
        const double us = time([&](uint64_t i) {
          CHECK_CUDA(launchReadCeiling(pool_ + i * size, size, sink, blocks, stream_));
        }, size, size >= 256 * kMiB ? 9 : 15, min_batch);
        add(min_batch == 1 ? "read ceiling (16-byte loads)" : "read ceiling, 4 back-to-back",
            human(size), us, size);
      }
    }
  }

  // One launch of each digest shape, for a profiler (bench_kernels --profile).
  void profileOnce() {
    for (uint64_t size : {4 * kKiB, 16 * kMiB, 256 * kMiB, 1 * kGiB}) {
      CHECK_STATUS(digester_[0].digest(reinterpret_cast<CUdeviceptr>(pool_), size, slots_, stream_));
    }
    CHECK_STATUS(digester_[0].digestRows(reinterpret_cast<CUdeviceptr>(pool_), 2048, 8 * kKiB,
                                         8 * kKiB, static_cast<uint64_t*>(row_out_), nullptr, stream_));
    const void* in[4] = {pool_, pool_ + 64 * kMiB, pool_ + 128 * kMiB, pool_ + 192 * kMiB};
    CHECK_STATUS(dk::fixedOrderReduce(in, 4, pool_ + 256 * kMiB, 32 * kMiB, dk::DType::kBF16,
                                      dk::ReduceOrder::kTree, 0, stream_));
    CHECK_STATUS(dk::rmsNorm(pool_, pool_ + kGiB, pool_ + 64 * kMiB, 4096, 8192, 1e-6f,
                             dk::DType::kBF16, stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));
  }

  void setDigestOnly(bool v) { digest_only_ = v; }

  void print() const {
    std::printf("\n%-34s | %-12s | %10s | %9s | %s\n", "kernel", "size", "time_us", "GB/s",
                "% of ceiling");
    std::printf("%s\n", std::string(90, '-').c_str());
    for (const Row& r : rows_) {
      std::printf("%-34s | %-12s | %10.2f | %9.1f | %5.1f\n", r.kernel.c_str(), r.size.c_str(),
                  r.time_us, r.gbps, r.pct);
    }
    std::printf("\nGB/s counts bytes read + written (digests only read). Ceiling: the 512 MiB "
                "device copy above, %.1f GB/s. Median of batches of back-to-back calls, launch "
                "included, inputs rotated over >= 256 MiB.\n",
                ceiling_gbps_);
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  unsigned char* pool_ = nullptr;
  void* copy_dst_ = nullptr;
  dk::DigestSlot* slots_ = nullptr;
  void* row_out_ = nullptr;
  dk::DigestSlot* row_slots_ = nullptr;
  bool digest_only_ = false;
  std::vector<dk::Digester> digester_;
  std::vector<Row> rows_;
  double ceiling_gbps_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Bench bench;
  if (argc > 1 && std::strcmp(argv[1], "--profile") == 0) {
    bench.profileOnce();
    return 0;
  }
  const bool digest_only = argc > 1 && std::strcmp(argv[1], "--digest") == 0;
  bench.setDigestOnly(digest_only);
  bench.copyCeiling();
  bench.diagnostics();
  bench.digests();
  if (!digest_only) {
    bench.reductions();
    bench.rmsnorms();
  }
  bench.print();
  return 0;
}
