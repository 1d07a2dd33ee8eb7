// GPU digests against the CPU twin, bit for bit: every size class and kernel mode (packed in a
// warp, packed in a block, split across blocks), unaligned bases, rows with odd strides, slot
// reuse, CUDA graph capture and mapped host output.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "detrace/kernels/digest.h"
#include "kernels_gpu_util.h"

namespace detrace::kernels {
namespace {

using testing::DeviceBuffer;

class DigestGpuTest : public testing::GpuTest {
 protected:
  void SetUp() override {
    testing::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto d = Digester::create();
    ASSERT_TRUE(d.isOk()) << d.status().message();
    digester_ = std::make_unique<Digester>(std::move(d).value());
    slots_ = DeviceBuffer(64 * sizeof(DigestSlot));
    ASSERT_TRUE(slots_.ok());
    slots_.poison(0);  // zeroed once, as the contract says
  }
  DigestSlot* slot(int i = 0) const { return reinterpret_cast<DigestSlot*>(slots_.get()) + i; }

  // Digest of device bytes [p, p + len) read back from the slot, with the slot's digest poisoned
  // beforehand.
  uint64_t gpuDigest(const unsigned char* p, uint64_t len, int slot_index = 0) {
    EXPECT_EQ(cudaMemset(&slot(slot_index)->digest, 0xff, 8), cudaSuccess);
    const Status s = digester_->digest(reinterpret_cast<CUdeviceptr>(p), len, slot(slot_index),
                                       nullptr);
    EXPECT_TRUE(s.isOk()) << s.message();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    DigestSlot host{};
    EXPECT_EQ(cudaMemcpy(&host, slot(slot_index), sizeof host, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(host.sum, 0u) << "slot not reset after len " << len;
    EXPECT_EQ(host.done_chunks, 0u) << "slot not reset after len " << len;
    return host.digest;
  }

  std::unique_ptr<Digester> digester_;
  DeviceBuffer slots_;
};

TEST_F(DigestGpuTest, MatchesCpuForAllSizeClasses) {
  DETRACE_REQUIRE_GPU();
  // Chunk edges (1024), the warp/block/split mode edges (8 KiB, 64 KiB), tails of every length
  // class (len % 32), and large sizes whose blocks loop over many passes.
  std::vector<uint64_t> sizes = {0,     1,     7,     31,    32,    33,    63,     64,
                                 511,   512,   513,   1023,  1024,  1025,  2047,   4095,
                                 4096,  4097,  8191,  8192,  8193,  9216,  12345,  65535,
                                 65536, 65537, 66560, 65536 * 2 + 3,    (1u << 20) + 13,
                                 (16u << 20) + 5,     (64u << 20) + 29};
  for (int i = 0; i < 12; ++i) sizes.push_back(rng_() % (3u << 20));
  const uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  const auto host = randomBytes(max_size + 16);
  DeviceBuffer buf(max_size + 16);
  ASSERT_TRUE(buf.ok());
  buf.upload(host.data(), host.size());
  for (uint64_t len : sizes) {
    for (uint64_t offset : {0, 1, 2, 3, 4, 8, 12, 15, 16}) {
      // keep the run short: large sizes at the 16- (0, 16), 8- (8) and 1-byte-aligned (3, 15) kernels
      if (len > (1u << 20) && offset % 4 != 3 && offset % 8 != 0) continue;
      EXPECT_EQ(gpuDigest(buf.get() + offset, len), digestCpu(host.data() + offset, len))
          << "len " << len << " offset " << offset;
    }
  }
}

TEST_F(DigestGpuTest, SlotIsReusableAndResultDeterministic) {
  DETRACE_REQUIRE_GPU();
  const uint64_t len = (8u << 20) + 77;
  const auto host = randomBytes(len);
  DeviceBuffer buf(len);
  ASSERT_TRUE(buf.ok());
  buf.upload(host.data(), len);
  const uint64_t want = digestCpu(host.data(), len);
  for (int i = 0; i < 20; ++i) ASSERT_EQ(gpuDigest(buf.get(), len), want) << "repeat " << i;
  // Back-to-back launches on one stream reuse the slot without synchronisation in between.
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(digester_->digest(reinterpret_cast<CUdeviceptr>(buf.get()), len, slot(), nullptr)
                    .isOk());
  }
  EXPECT_EQ(gpuDigest(buf.get(), len), want);
}

TEST_F(DigestGpuTest, SingleBitFlipChangesGpuDigest) {
  DETRACE_REQUIRE_GPU();
  const uint64_t len = 1u << 20;
  auto host = randomBytes(len);
  DeviceBuffer buf(len);
  ASSERT_TRUE(buf.ok());
  buf.upload(host.data(), len);
  const uint64_t before = gpuDigest(buf.get(), len);
  const uint64_t at = rng_() % len;
  host[at] ^= 0x10;
  buf.upload(host.data() + at, 1, at);
  EXPECT_NE(gpuDigest(buf.get(), len), before);
  EXPECT_EQ(gpuDigest(buf.get(), len), digestCpu(host.data(), len));
}

struct RowCase {
  uint32_t rows;
  uint64_t row_bytes;
  uint64_t stride;
  uint64_t offset;
};

TEST_F(DigestGpuTest, RowsMatchCpu) {
  DETRACE_REQUIRE_GPU();
  const std::vector<RowCase> cases = {
      // packed in a warp (rows of 1..8 chunks)
      {1, 0, 0, 0},          {5, 0, 16, 0},          {1, 1, 1, 0},
      {7, 100, 101, 3},      {1000, 64, 66, 2},      {33, 8192, 8192, 0},
      {33, 8192, 8194, 2},   {9, 4096, 4096, 0},     {5, 3 * 1024 + 7, 3 * 1024 + 9, 1},
      {300, 5000, 5001, 7},  {2048, 8192, 8192, 0},  {64, 4095, 4097, 1},
      {1000, 3000, 3004, 0}, {100, 1024, 1028, 4},   {3000, 2048, 2048, 0},
      {40000, 1024, 1028, 4},  // more passes than resident blocks: blocks loop
      // packed in a block (9..64 chunks)
      {5, 3 * 4096 + 7, 3 * 4096 + 9, 1},            {17, 65536, 65538, 6},
      {40, 9216, 9216, 0},   {300, 20000, 20004, 4}, {7, 33 * 1024 + 1, 33 * 1024 + 8, 0},
      {4000, 9216, 9216, 0},  // more passes than resident blocks: blocks loop
      // split across blocks (more than 64 chunks)
      {4, 65537, 65537, 0},  {3, 70000, 70003, 5},   {2, 1u << 20, (1u << 20) + 2, 2},
      {1, 16u << 20, 0, 0},  {600, 66560, 66560, 0}, {9, 300000, 300008, 8},
      // split, more than 256 passes (no L2 prefetch), a partial last chunk in every row
      {200, 70000, 70016, 0}, {130, 140000, 140000, 16}};
  for (const RowCase& c : cases) {
    const uint64_t span = c.rows == 0 ? 0 : (c.rows - 1) * c.stride + c.row_bytes;
    const auto host = randomBytes(span + c.offset + 1);
    DeviceBuffer buf(host.size()), out(c.rows * 8ull), ws(c.rows * sizeof(DigestSlot));
    ASSERT_TRUE(buf.ok() && out.ok() && ws.ok());
    buf.upload(host.data(), host.size());
    ws.poison(0);
    for (int repeat = 0; repeat < 2; ++repeat) {  // the second run reuses the workspace
      out.poison();
      const Status s = digester_->digestRows(
          reinterpret_cast<CUdeviceptr>(buf.get() + c.offset), c.rows, c.row_bytes, c.stride,
          reinterpret_cast<uint64_t*>(out.get()), reinterpret_cast<DigestSlot*>(ws.get()),
          nullptr);
      ASSERT_TRUE(s.isOk()) << s.message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint64_t> want(c.rows);
      digestRowsCpu(host.data() + c.offset, c.rows, c.row_bytes, c.stride, want.data());
      const auto got = out.download(c.rows * 8ull);
      for (uint32_t r = 0; r < c.rows; ++r) {
        uint64_t g;
        std::memcpy(&g, got.data() + r * 8ull, 8);
        ASSERT_EQ(g, want[r]) << "rows " << c.rows << " x " << c.row_bytes << " stride "
                              << c.stride << " offset " << c.offset << ": row " << r;
      }
    }
  }
}

// Every kernel a 16-byte-aligned buffer can be given (DETRACE_DIGEST_WIDE: the 16-byte loader,
// its deep variant, the 8-byte loader) gives the CPU twin's digests: whole buffers in each mode
// (one chunk, packed in a block, split with and without L2 prefetch, a partial last chunk) and
// rows whose stride is a multiple of 16, through digest(), digestRows() and digestMany().
TEST_F(DigestGpuTest, EveryWideVariantMatchesCpu) {
  DETRACE_REQUIRE_GPU();
  const uint64_t sizes[] = {1024, 40000, (1u << 20) + 48, (32u << 20) + 16};
  const auto host = randomBytes((32u << 20) + 64);
  DeviceBuffer buf(host.size()), out(8 * 600);
  ASSERT_TRUE(buf.ok() && out.ok());
  buf.upload(host.data(), host.size());
  for (const char* variant : {"1", "deep", "0"}) {
    SCOPED_TRACE(std::string("DETRACE_DIGEST_WIDE=") + variant);
    ASSERT_EQ(setenv("DETRACE_DIGEST_WIDE", variant, 1), 0);
    auto made = Digester::create();  // reads the variable
    unsetenv("DETRACE_DIGEST_WIDE");
    ASSERT_TRUE(made.isOk()) << made.status().message();
    const Digester& d = *made;
    for (uint64_t len : sizes) {
      ASSERT_EQ(cudaMemset(&slot()->digest, 0xff, 8), cudaSuccess);
      ASSERT_TRUE(d.digest(reinterpret_cast<CUdeviceptr>(buf.get()), len, slot(), nullptr).isOk());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      DigestSlot got{};
      ASSERT_EQ(cudaMemcpy(&got, slot(), sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(got.digest, digestCpu(host.data(), len)) << "whole " << len;
    }
    // 600 rows of 5000 bytes, stride 5008 (a multiple of 16), then the same through digestMany
    // beside a whole buffer.
    std::vector<uint64_t> want(600);
    digestRowsCpu(host.data(), 600, 5000, 5008, want.data());
    for (int way = 0; way < 2; ++way) {
      out.poison();
      auto* outs = reinterpret_cast<uint64_t*>(out.get());
      if (way == 0) {
        ASSERT_TRUE(d.digestRows(reinterpret_cast<CUdeviceptr>(buf.get()), 600, 5000, 5008, outs,
                                 nullptr, nullptr).isOk());
      } else {
        DigestRequest r[2];
        r[0].base = reinterpret_cast<CUdeviceptr>(buf.get());
        r[0].rows = 600;
        r[0].row_bytes = 5000;
        r[0].row_stride = 5008;
        r[0].out = outs;
        r[1].base = reinterpret_cast<CUdeviceptr>(buf.get());
        r[1].bytes = sizes[3];
        r[1].slot = slot(1);
        ASSERT_EQ(cudaMemset(&slot(1)->digest, 0xff, 8), cudaSuccess);
        ASSERT_TRUE(d.digestMany(r, 2, nullptr).isOk());
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto got = out.download(8 * 600);
      for (uint32_t i = 0; i < 600; ++i) {
        uint64_t g;
        std::memcpy(&g, got.data() + 8ull * i, 8);
        ASSERT_EQ(g, want[i]) << (way == 0 ? "digestRows" : "digestMany") << ": row " << i;
      }
      if (way == 1) {
        DigestSlot whole{};
        ASSERT_EQ(cudaMemcpy(&whole, slot(1), sizeof whole, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(whole.digest, digestCpu(host.data(), sizes[3])) << "digestMany, whole buffer";
      }
    }
  }
}

TEST_F(DigestGpuTest, LongRowsNeedAWorkspace) {
  DETRACE_REQUIRE_GPU();
  DeviceBuffer out(8);
  const Status s = digester_->digestRows(0x1000, 1, kDigestRowBytesWithoutWorkspace + 1, 0,
                                         reinterpret_cast<uint64_t*>(out.get()), nullptr, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(digester_->digest(0x1000, 10, nullptr, nullptr).code(), ErrorCode::kInvalidArgument);
}

TEST_F(DigestGpuTest, GraphCaptureGivesTheSameDigest) {
  DETRACE_REQUIRE_GPU();
  const uint64_t len = (4u << 20) + 123;
  const auto host = randomBytes(len);
  DeviceBuffer buf(len), out(8 * 4);
  ASSERT_TRUE(buf.ok() && out.ok());
  buf.upload(host.data(), len);
  const uint64_t eager = gpuDigest(buf.get(), len);
  ASSERT_EQ(eager, digestCpu(host.data(), len));

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  auto* o = reinterpret_cast<uint64_t*>(out.get());
  const auto src = reinterpret_cast<CUdeviceptr>(buf.get());
  const Status s1 = digester_->digest(src, len, slot(1), stream, o);
  const Status s2 = digester_->digest(src + 1, 1000, slot(2), stream, o + 1);
  const Status s3 = digester_->digestRows(src, 2, 5000, 6000, o + 2, nullptr, stream);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(s1.isOk() && s2.isOk() && s3.isOk()) << s1.message() << s2.message() << s3.message();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  uint64_t rows_want[2];
  digestRowsCpu(host.data(), 2, 5000, 6000, rows_want);
  for (int replay = 0; replay < 3; ++replay) {
    out.poison();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const auto got = out.download(32);
    uint64_t v[4];
    std::memcpy(v, got.data(), 32);
    EXPECT_EQ(v[0], eager) << "replay " << replay;
    EXPECT_EQ(v[1], digestCpu(host.data() + 1, 1000)) << "replay " << replay;
    EXPECT_EQ(v[2], rows_want[0]) << "replay " << replay;
    EXPECT_EQ(v[3], rows_want[1]) << "replay " << replay;
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  (void)cudaStreamDestroy(stream);
}

TEST_F(DigestGpuTest, WritesToMappedHostMemory) {
  DETRACE_REQUIRE_GPU();
  const uint64_t len = 3 * 1024 + 5;  // one warp, no atomics on the output
  const auto host = randomBytes(len);
  DeviceBuffer buf(len);
  ASSERT_TRUE(buf.ok());
  buf.upload(host.data(), len);
  uint64_t* mapped = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&mapped), 8, cudaHostAllocMapped), cudaSuccess);
  *mapped = ~uint64_t{0};
  uint64_t* mapped_dev = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped_dev), mapped, 0),
            cudaSuccess);
  ASSERT_TRUE(digester_->digest(reinterpret_cast<CUdeviceptr>(buf.get()), len, slot(3), nullptr,
                                mapped_dev)
                  .isOk());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(*mapped, digestCpu(host.data(), len));
  (void)cudaFreeHost(mapped);
}

// digestMany: random batches of whole buffers and row sets (every kernel mode and alignment
// mixed, so some batches take more than one launch) give what the CPU twin gives, bit for bit,
// twice over the same slots and workspaces; an invalid request enqueues nothing.
TEST_F(DigestGpuTest, ManyInOneLaunchMatchCpu) {
  DETRACE_REQUIRE_GPU();
  struct Item {
    DigestRequest req;
    std::vector<unsigned char> host;
    uint64_t offset = 0;
    DeviceBuffer buf, out, ws;
  };
  const uint64_t whole_sizes[] = {0, 1, 1000, 4096, 65536 + 3, 1u << 20, (16u << 20) + 5};
  const RowCase row_cases[] = {{7, 100, 101, 3},     {1000, 64, 66, 2},   {33, 8192, 8192, 0},
                               {40, 9216, 9216, 0},  {17, 65536, 65538, 6}, {3, 70000, 70003, 5},
                               {600, 66560, 66560, 0}, {2, 1u << 20, (1u << 20) + 2, 2}};
  std::mt19937_64& rng = rng_;  // the fixture's, seeded and logged per test
  for (int trial = 0; trial < 12; ++trial) {
    const uint32_t n = 1 + static_cast<uint32_t>(rng() % Digester::kMaxBatch);
    std::vector<Item> items(n);
    std::vector<DigestRequest> reqs;
    for (Item& it : items) {
      const bool rows = rng() % 2 == 0;
      it.offset = std::array<uint64_t, 4>{0, 1, 4, 8}[rng() % 4];
      if (rows) {
        const RowCase c = row_cases[rng() % std::size(row_cases)];
        const uint64_t span = (c.rows - 1) * c.stride + c.row_bytes;
        it.host = randomBytes(span + it.offset + 1);
        it.buf = DeviceBuffer(it.host.size());
        it.out = DeviceBuffer(c.rows * 8ull);
        it.ws = DeviceBuffer(c.rows * sizeof(DigestSlot));
        it.req.rows = c.rows;
        it.req.row_bytes = c.row_bytes;
        it.req.row_stride = c.stride;
      } else {
        const uint64_t len = whole_sizes[rng() % std::size(whole_sizes)];
        it.host = randomBytes(len + it.offset + 1);
        it.buf = DeviceBuffer(it.host.size());
        it.out = DeviceBuffer(8);
        it.ws = DeviceBuffer(sizeof(DigestSlot));
        it.req.bytes = len;
      }
      ASSERT_TRUE(it.buf.ok() && it.out.ok() && it.ws.ok());
      it.buf.upload(it.host.data(), it.host.size());
      it.ws.poison(0);
      it.req.base = reinterpret_cast<CUdeviceptr>(it.buf.get() + it.offset);
      it.req.out = reinterpret_cast<uint64_t*>(it.out.get());
      it.req.slot = reinterpret_cast<DigestSlot*>(it.ws.get());
      reqs.push_back(it.req);
    }
    for (int repeat = 0; repeat < 2; ++repeat) {  // the second run reuses slots and workspaces
      for (Item& it : items) it.out.poison();
      const Status s = digester_->digestMany(reqs.data(), n, nullptr);
      ASSERT_TRUE(s.isOk()) << s.message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (uint32_t i = 0; i < n; ++i) {
        const Item& it = items[i];
        const uint32_t count = it.req.rows == 0 ? 1 : it.req.rows;
        std::vector<uint64_t> want(count);
        if (it.req.rows == 0) {
          want[0] = digestCpu(it.host.data() + it.offset, it.req.bytes);
        } else {
          digestRowsCpu(it.host.data() + it.offset, it.req.rows, it.req.row_bytes,
                        it.req.row_stride, want.data());
        }
        const auto got = it.out.download(count * 8ull);
        for (uint32_t r = 0; r < count; ++r) {
          uint64_t g;
          std::memcpy(&g, got.data() + r * 8ull, 8);
          ASSERT_EQ(g, want[r]) << "trial " << trial << " request " << i << " of " << n
                                << (it.req.rows ? " (rows)" : " (whole)") << " offset " << it.offset
                                << ": digest " << r;
        }
      }
    }
  }
  // An invalid request (long rows without a workspace) anywhere in the batch: nothing runs.
  DeviceBuffer buf(1 << 20), out(8 + 8);
  ASSERT_TRUE(buf.ok() && out.ok());
  out.poison();
  DigestRequest good, bad;
  good.base = reinterpret_cast<CUdeviceptr>(buf.get());
  good.bytes = 4096;
  good.out = reinterpret_cast<uint64_t*>(out.get());
  good.slot = slot(0);
  bad.base = reinterpret_cast<CUdeviceptr>(buf.get());
  bad.rows = 1;
  bad.row_bytes = kDigestRowBytesWithoutWorkspace + 1;
  bad.out = reinterpret_cast<uint64_t*>(out.get() + 8);
  const DigestRequest pair[] = {good, bad};
  EXPECT_EQ(digester_->digestMany(pair, 2, nullptr).code(), ErrorCode::kInvalidArgument);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto untouched = out.download(16);
  EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](unsigned char b) { return b == 0xff; }));
  std::vector<DigestRequest> too_many(Digester::kMaxBatch + 1, good);
  EXPECT_EQ(digester_->digestMany(too_many.data(), Digester::kMaxBatch + 1, nullptr).code(),
            ErrorCode::kInvalidArgument);
}

// digestMany's completion signal: the host, spinning on the mapped done word without any
// synchronisation, finds every digest of the batch (in mapped host memory) already final when the
// signal lands; batches of one and two launches (mixed alignments), split rows over many blocks,
// and the block counter is left zero for the next batch that uses it.
TEST_F(DigestGpuTest, DoneSignalLandsAfterEveryDigest) {
  DETRACE_REQUIRE_GPU();
  constexpr uint32_t kRows = 16;  // row digests of the first request
  uint64_t* mapped = nullptr;     // [0, kRows): rows, kRows: whole, kRows + 1: done word
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&mapped), (kRows + 2) * 8, cudaHostAllocMapped),
            cudaSuccess);
  uint64_t* mapped_dev = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped_dev), mapped, 0), cudaSuccess);
  DeviceBuffer counter(4), ws(kRows * sizeof(DigestSlot));
  ASSERT_TRUE(counter.ok() && ws.ok());
  counter.poison(0);
  ws.poison(0);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  volatile uint64_t* done_word = mapped + kRows + 1;
  for (int trial = 0; trial < 16; ++trial) {
    // Rows of 1..3 MiB (split over many blocks) and a whole buffer at an offset of 0 or 4 bytes:
    // one launch when both are 16-byte aligned, two otherwise.
    const uint64_t row_bytes = (1u << 20) + rng_() % (2u << 20);
    const uint64_t whole_offset = trial % 2 == 0 ? 0 : 4;
    const uint64_t whole_len = 1 + rng_() % (8u << 20);
    const auto rows_host = randomBytes(kRows * row_bytes);
    const auto whole_host = randomBytes(whole_len + whole_offset);
    DeviceBuffer rows_buf(rows_host.size()), whole_buf(whole_host.size());
    ASSERT_TRUE(rows_buf.ok() && whole_buf.ok());
    rows_buf.upload(rows_host.data(), rows_host.size());
    whole_buf.upload(whole_host.data(), whole_host.size());
    // A pageable cudaMemcpy may return before its DMA lands, and `stream` does not wait for the
    // legacy stream (an H100 run, 2026-12-05, digested a 3 MB whole buffer mid-upload).
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    DigestRequest r[2];
    r[0].base = reinterpret_cast<CUdeviceptr>(rows_buf.get());
    r[0].rows = kRows;
    r[0].row_bytes = row_bytes;
    r[0].row_stride = row_bytes;
    r[0].out = mapped_dev;
    r[0].slot = reinterpret_cast<DigestSlot*>(ws.get());
    r[1].base = reinterpret_cast<CUdeviceptr>(whole_buf.get() + whole_offset);
    r[1].bytes = whole_len;
    r[1].out = mapped_dev + kRows;
    r[1].slot = slot(0);
    std::fill(mapped, mapped + kRows + 1, ~uint64_t{0});
    *done_word = 0;
    DoneSignal done;
    done.flag = reinterpret_cast<volatile uint64_t*>(mapped_dev + kRows + 1);
    done.value = 1000 + static_cast<uint64_t>(trial);
    done.counter = reinterpret_cast<uint32_t*>(counter.get());
    const Status st = digester_->digestMany(r, 2, stream, nullptr, &done);
    ASSERT_TRUE(st.isOk()) << st.message();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (*done_word != done.value && std::chrono::steady_clock::now() < deadline) {
    }
    ASSERT_EQ(*done_word, done.value) << "trial " << trial << ": no signal within 10 s";
    std::atomic_thread_fence(std::memory_order_acquire);
    std::vector<uint64_t> want(kRows);
    digestRowsCpu(rows_host.data(), kRows, row_bytes, row_bytes, want.data());
    // Read once at the signal; after the stream's end, a mismatch says whether it was late (the
    // final value came after the signal) or wrong (it never came).
    std::vector<uint64_t> at_signal(mapped, mapped + kRows + 1);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const uint64_t want_whole = digestCpu(whole_host.data() + whole_offset, whole_len);
    auto when = [&](uint32_t i, uint64_t expected) {
      return mapped[i] == expected ? "final only after the signal" : "wrong even after the stream's end";
    };
    const std::string what = "trial " + std::to_string(trial) + " (rows of " + std::to_string(row_bytes) +
                             " bytes, a whole buffer of " + std::to_string(whole_len) + " at +" +
                             std::to_string(whole_offset) + ")";
    for (uint32_t i = 0; i < kRows; ++i) {
      ASSERT_EQ(at_signal[i], want[i]) << what << ": row " << i << " " << when(i, want[i]);
    }
    ASSERT_EQ(at_signal[kRows], want_whole) << what << ": whole buffer " << when(kRows, want_whole);
    const auto left = counter.download(4);
    ASSERT_TRUE(std::all_of(left.begin(), left.end(), [](unsigned char b) { return b == 0; }))
        << "trial " << trial << ": block counter not left zero";
  }
  // A signal without its counter is refused before anything runs.
  DoneSignal incomplete;
  incomplete.flag = reinterpret_cast<volatile uint64_t*>(mapped_dev + kRows + 1);
  DigestRequest one;
  one.base = reinterpret_cast<CUdeviceptr>(ws.get());
  one.bytes = 64;
  one.out = mapped_dev;
  one.slot = slot(0);
  EXPECT_EQ(digester_->digestMany(&one, 1, stream, nullptr, &incomplete).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(mapped), cudaSuccess);
}

// Every kernel mode beside a 64 MiB digest of the same alignment in one digestMany launch, so that
// it runs on a grid far larger than its own (blocks with no pass of it must leave its slot alone):
// empty rows, rows packed in warps and in blocks, one long row (strided passes), several long rows
// (contiguous passes), and a whole buffer written to its slot (no `out`); every stride a multiple
// of 16, so both share the large one's kernel at each base offset (16-, 8-, 4- and 1-byte
// aligned). Each result equals the CPU twin's and every slot and workspace is zero again afterwards.
TEST_F(DigestGpuTest, ManySmallDigestsBesideALargeOne) {
  DETRACE_REQUIRE_GPU();
  struct Small {
    uint32_t rows;  // 0: a whole buffer of `bytes`
    uint64_t bytes, row_bytes, stride;
  };
  const Small smalls[] = {{300, 0, 0, 0},          {1000, 0, 64, 80},    {40, 0, 9216, 9216},
                          {1, 0, 3u << 20, 0},     {6, 0, 70000, 70016}, {0, 200000, 0, 0}};
  for (uint64_t offset : {0, 8, 4, 1}) {
    for (const Small& sm : smalls) {
      const uint64_t large = 64u << 20;
      const uint64_t span = sm.rows == 0 ? sm.bytes : (sm.rows - 1) * sm.stride + sm.row_bytes;
      const auto big_host = randomBytes(large + offset);
      const auto small_host = randomBytes(span + offset + 1);
      DeviceBuffer big(big_host.size()), small(small_host.size()), out(8 + 8ull * std::max(sm.rows, 1u)),
          ws(sizeof(DigestSlot) * (1 + std::max(sm.rows, 1u)));
      ASSERT_TRUE(big.ok() && small.ok() && out.ok() && ws.ok());
      big.upload(big_host.data(), big_host.size());
      small.upload(small_host.data(), small_host.size());
      ws.poison(0);
      out.poison();
      auto* slots = reinterpret_cast<DigestSlot*>(ws.get());
      auto* outs = reinterpret_cast<uint64_t*>(out.get());
      DigestRequest r[2];
      r[0].base = reinterpret_cast<CUdeviceptr>(big.get() + offset);
      r[0].bytes = large;
      r[0].out = outs;
      r[0].slot = slots;
      r[1].base = reinterpret_cast<CUdeviceptr>(small.get() + offset);
      if (sm.rows == 0) {
        r[1].bytes = sm.bytes;
        r[1].slot = slots + 1;  // no out: the digest goes to the slot
      } else {
        r[1].rows = sm.rows;
        r[1].row_bytes = sm.row_bytes;
        r[1].row_stride = sm.stride;
        r[1].out = outs + 1;
        r[1].slot = slots + 1;
      }
      uint32_t enqueued = 0;
      const Status st = digester_->digestMany(r, 2, nullptr, &enqueued);
      ASSERT_TRUE(st.isOk()) << st.message();
      EXPECT_EQ(enqueued, 3u);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto got = out.download(8 + 8ull * std::max(sm.rows, 1u));
      uint64_t g = 0;
      std::memcpy(&g, got.data(), 8);
      ASSERT_EQ(g, digestCpu(big_host.data() + offset, large)) << "the large digest, offset " << offset;
      const auto ws_after = ws.download(sizeof(DigestSlot) * (1 + std::max(sm.rows, 1u)));
      std::vector<DigestSlot> after(1 + std::max(sm.rows, 1u));
      std::memcpy(after.data(), ws_after.data(), ws_after.size());
      if (sm.rows == 0) {
        EXPECT_EQ(after[1].digest, digestCpu(small_host.data() + offset, sm.bytes))
            << "whole " << sm.bytes << " offset " << offset;
      } else {
        std::vector<uint64_t> want(sm.rows);
        digestRowsCpu(small_host.data() + offset, sm.rows, sm.row_bytes, sm.stride, want.data());
        for (uint32_t i = 0; i < sm.rows; ++i) {
          std::memcpy(&g, got.data() + 8 + 8ull * i, 8);
          ASSERT_EQ(g, want[i]) << sm.rows << " rows of " << sm.row_bytes << " offset " << offset
                                << ": row " << i;
        }
      }
      for (size_t i = 0; i < after.size(); ++i) {
        EXPECT_EQ(after[i].sum, 0u) << "slot " << i << " left with a sum";
        EXPECT_EQ(after[i].done_chunks, 0u) << "slot " << i << " left with a count";
      }
    }
  }
}

// digestManyVia captured into a CUDA graph: a random batch of whole buffers and row sets (mixed
// alignments, so some batches take two launches or more; small whole buffers and short rows
// sharing one slot, which must stay zero) writes, at each replay, to wherever the cell points then: two destinations in
// turn, each poisoned before, give the CPU twin's digests at each request's offset; a replay with
// the cell at 0 writes nothing; the launch count is one per alignment class.
TEST_F(DigestGpuTest, ManyViaInAGraphFollowTheCell) {
  DETRACE_REQUIRE_GPU();
  const uint64_t whole_sizes[] = {0, 1, 1000, 65536, 65537, (3u << 20) + 5};
  const RowCase row_cases[] = {{1, 1024, 1024, 0}, {7, 100, 101, 3}, {64, 1024, 1040, 0},
                               {3, 70000, 70003, 5}, {2, 1u << 20, (1u << 20) + 2, 2}};
  DeviceBuffer cell(8), shared_ws(sizeof(DigestSlot));
  ASSERT_TRUE(cell.ok() && shared_ws.ok());
  shared_ws.poison(0);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (int trial = 0; trial < 10; ++trial) {
    const uint32_t n = 1 + static_cast<uint32_t>(rng_() % Digester::kMaxBatch);
    struct Item {
      std::vector<unsigned char> host;
      uint64_t offset = 0;
      DeviceBuffer buf, ws;
    };
    std::vector<Item> items(n);
    std::vector<DigestRequest> reqs(n);
    std::vector<uint64_t> want;  // every digest of the batch, in destination order
    std::set<uint64_t> aligns;
    for (uint32_t i = 0; i < n; ++i) {
      Item& it = items[i];
      DigestRequest& r = reqs[i];
      it.offset = std::array<uint64_t, 4>{0, 0, 8, 1}[rng_() % 4];
      r.out_offset = static_cast<uint32_t>(want.size());
      if (rng_() % 2 == 0) {
        const RowCase c = row_cases[rng_() % std::size(row_cases)];
        const uint64_t span = (c.rows - 1) * c.stride + c.row_bytes;
        it.host = randomBytes(span + it.offset + 1);
        it.ws = DeviceBuffer(c.rows * sizeof(DigestSlot));
        r.rows = c.rows;
        r.row_bytes = c.row_bytes;
        r.row_stride = c.stride;
        std::vector<uint64_t> rows(c.rows);
        digestRowsCpu(it.host.data() + it.offset, c.rows, c.row_bytes, c.stride, rows.data());
        want.insert(want.end(), rows.begin(), rows.end());
        aligns.insert((it.offset | (c.rows > 1 ? c.stride : 0)) % 16 == 0 ? 16
                      : (it.offset | (c.rows > 1 ? c.stride : 0)) % 8 == 0 ? 8
                      : (it.offset | (c.rows > 1 ? c.stride : 0)) % 4 == 0 ? 4 : 1);
      } else {
        const uint64_t len = whole_sizes[rng_() % std::size(whole_sizes)];
        it.host = randomBytes(len + it.offset + 1);
        it.ws = DeviceBuffer(sizeof(DigestSlot));
        r.bytes = len;
        want.push_back(digestCpu(it.host.data() + it.offset, len));
        aligns.insert(it.offset % 16 == 0 ? 16 : it.offset % 8 == 0 ? 8 : it.offset % 4 == 0 ? 4 : 1);
      }
      it.buf = DeviceBuffer(it.host.size());
      ASSERT_TRUE(it.buf.ok() && it.ws.ok());
      it.buf.upload(it.host.data(), it.host.size());
      it.ws.poison(0);
      r.base = reinterpret_cast<CUdeviceptr>(it.buf.get() + it.offset);
      // Small whole buffers and short rows never touch their slot or workspace: they share one.
      const bool shares = (r.rows == 0 ? r.bytes : r.row_bytes) <= kDigestRowBytesWithoutWorkspace;
      r.slot = reinterpret_cast<DigestSlot*>(shares ? shared_ws.get() : it.ws.get());
      r.out = nullptr;  // ignored: the cell says where
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // uploads and zeroed slots in place
    const uint64_t words = want.size();
    DeviceBuffer dest[2] = {DeviceBuffer(8 * words), DeviceBuffer(8 * words)};
    ASSERT_TRUE(dest[0].ok() && dest[1].ok());
    const auto* cell_word = reinterpret_cast<const uint64_t*>(cell.get());
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    uint32_t launches = 0;
    const Status st = digester_->digestManyVia(reqs.data(), n, cell_word, stream, &launches);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_TRUE(st.isOk()) << st.message();
    EXPECT_EQ(launches, aligns.size()) << "trial " << trial << ": one launch per alignment class";
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 4; ++replay) {
      const int d = replay % 2;
      dest[0].poison();
      dest[1].poison();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // poisoned before the stream's work
      const uint64_t* cells[] = {cell_word};
      const uint64_t base = reinterpret_cast<uint64_t>(dest[d].get());
      ASSERT_TRUE(digester_->storeWords(cells, &base, 1, stream).isOk());
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const auto got = dest[d].download(8 * words);
      for (uint64_t w = 0; w < words; ++w) {
        uint64_t g;
        std::memcpy(&g, got.data() + 8 * w, 8);
        ASSERT_EQ(g, want[w]) << "trial " << trial << " replay " << replay << ": word " << w
                              << " of " << words;
      }
      const auto other = dest[1 - d].download(8 * words);
      ASSERT_TRUE(std::all_of(other.begin(), other.end(), [](unsigned char b) { return b == 0xff; }))
          << "trial " << trial << ": the other destination was written";
    }
    // The cell at 0: the replay skips every digest.
    dest[0].poison();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const uint64_t* cells[] = {cell_word};
    const uint64_t zero = 0;
    ASSERT_TRUE(digester_->storeWords(cells, &zero, 1, stream).isOk());
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const auto none = dest[0].download(8 * words);
    EXPECT_TRUE(std::all_of(none.begin(), none.end(), [](unsigned char b) { return b == 0xff; }))
        << "trial " << trial << ": a replay with the cell at 0 wrote";
    for (const Item& it : items) {  // slots and workspaces left zero for the next replay
      const auto left = it.ws.download(it.ws.bytes());
      ASSERT_TRUE(std::all_of(left.begin(), left.end(), [](unsigned char b) { return b == 0; }))
          << "trial " << trial << ": a slot or workspace left dirty";
    }
    const auto shared_left = shared_ws.download(sizeof(DigestSlot));
    ASSERT_TRUE(std::all_of(shared_left.begin(), shared_left.end(), [](unsigned char b) { return b == 0; }))
        << "trial " << trial << ": the shared slot was touched";
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
  }
  // No cell: refused before anything is enqueued.
  DigestRequest one;
  one.base = reinterpret_cast<CUdeviceptr>(shared_ws.get());
  one.bytes = 8;
  one.slot = reinterpret_cast<DigestSlot*>(shared_ws.get());
  EXPECT_EQ(digester_->digestManyVia(&one, 1, nullptr, stream).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace detrace::kernels
