// PeerAllReduce across the GPUs of the machine (one process), against the CPU twin of the
// fixed-order reduction: the fused kernel (distinct GPUs: every GPU, 3 GPUs for the run-time rank
// loop, unaligned buffers for the scalar path, many calls in a row with no host synchronisation)
// and the copy path (ranks sharing a GPU; DETRACE_PEER_MODE=copies).
#include <cstdlib>

#include "detrace/kernels/peer_allreduce.h"
#include "kernels_gpu_util.h"
#include "rank_inputs.h"

namespace detrace::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RankInputs;
using testing::randomRankInputs;

int gpuCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// One rank per entry of `devices`: its stream, and buffers of `count` elements starting `offset`
// bytes into the allocation (an offset that is not a multiple of 16 takes the scalar path).
class PeerAllReduceGpuTest : public testing::GpuTest {
 protected:
  void TearDown() override {
    for (size_t r = 0; r < streams_.size(); ++r) {
      (void)cudaSetDevice(devices_[r]);
      (void)cudaStreamDestroy(streams_[r]);
    }
    send_.clear();
    recv_.clear();
    (void)cudaSetDevice(0);
    unsetenv("DETRACE_PEER_MODE");
    testing::GpuTest::TearDown();
  }

  void makeRanks(std::vector<int> devices) {
    devices_ = std::move(devices);
    for (int d : devices_) {
      ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
      ASSERT_EQ(cudaStreamCreateWithFlags(&streams_.emplace_back(), cudaStreamNonBlocking), cudaSuccess);
    }
    auto made = PeerAllReduce::create(devices_);
    ASSERT_TRUE(made.isOk()) << made.status().message();
    peer_ = std::move(*made);
  }

  void makeBuffers(size_t bytes, size_t offset) {
    send_.clear();
    recv_.clear();
    sends_.clear();
    recvs_.clear();
    for (int d : devices_) {
      ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
      send_.push_back(std::make_unique<DeviceBuffer>(bytes + offset));
      recv_.push_back(std::make_unique<DeviceBuffer>(bytes + offset));
      ASSERT_TRUE(send_.back()->ok() && recv_.back()->ok());
      sends_.push_back(send_.back()->get() + offset);
      recvs_.push_back(recv_.back()->get() + offset);
    }
  }

  void settle() {  // the legacy-stream copies and memsets done before the streams run
    for (int d : devices_) {
      ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }

  // Runs the all-reduce twice on fresh inputs and checks every rank's output both times.
  void check(DType dtype, size_t count, ReduceOrder order, int start, size_t offset = 0) {
    const int n = static_cast<int>(devices_.size());
    SCOPED_TRACE(::testing::Message() << dtypeName(dtype) << " count " << count << " ranks " << n
                                      << " order " << reduceOrderName(order) << " start " << start
                                      << " offset " << offset);
    const size_t bytes = count * dtypeSize(dtype);
    const RankInputs data = randomRankInputs(rng_, n, count, dtype, order, start);
    makeBuffers(bytes, offset);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(cudaSetDevice(devices_[static_cast<size_t>(r)]), cudaSuccess);
      send_[static_cast<size_t>(r)]->upload(data.inputs[static_cast<size_t>(r)].data(), bytes, offset);
      recv_[static_cast<size_t>(r)]->poison();
    }
    settle();
    for (int rep = 0; rep < 2; ++rep) {  // twice: the same bits again
      const Status s = peer_->run(sends_.data(), recvs_.data(), count, dtype, order, start, streams_.data());
      ASSERT_TRUE(s.isOk()) << s.message();
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(cudaSetDevice(devices_[static_cast<size_t>(r)]), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(streams_[static_cast<size_t>(r)]), cudaSuccess);
        EXPECT_EQ(recv_[static_cast<size_t>(r)]->download(bytes, offset), data.sum)
            << "rank " << r << " run " << rep;
        recv_[static_cast<size_t>(r)]->poison();
      }
      settle();
    }
  }

  std::vector<int> devices_;
  std::vector<cudaStream_t> streams_;
  std::unique_ptr<PeerAllReduce> peer_;
  std::vector<std::unique_ptr<DeviceBuffer>> send_, recv_;
  std::vector<const void*> sends_;
  std::vector<void*> recvs_;
};

std::vector<int> firstGpus(int n) {
  std::vector<int> d;
  for (int r = 0; r < n; ++r) d.push_back(r);
  return d;
}

TEST_F(PeerAllReduceGpuTest, EveryGpuGetsTheFixedOrderSum) {
  const int ngpu = gpuCount();
  if (ngpu < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << ngpu;
  makeRanks(firstGpus(std::min(ngpu, 8)));
  EXPECT_TRUE(peer_->fused());
  const int n = peer_->ranks();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (size_t count : {(size_t{1} << 20) + 5, size_t{3}}) {
      check(dtype, count, ReduceOrder::kTree, 0);
    }
  }
  check(DType::kBF16, (size_t{1} << 18) + 9, ReduceOrder::kRankOrder, 0);
  check(DType::kBF16, (size_t{1} << 18) + 9, ReduceOrder::kRing, n - 1);
  check(DType::kF32, 4096, ReduceOrder::kReversed, 0);
  // In place is refused, not miscomputed.
  std::vector<void*> aliased(recvs_);
  aliased[0] = const_cast<void*>(sends_[0]);
  EXPECT_EQ(peer_->run(sends_.data(), aliased.data(), 4096, DType::kF32, ReduceOrder::kTree, 0,
                       streams_.data()).code(),
            ErrorCode::kInvalidArgument);
}

TEST_F(PeerAllReduceGpuTest, ThreeRanksTakeTheRunTimeRankLoop) {
  const int ngpu = gpuCount();
  if (ngpu < 3) GTEST_SKIP() << "needs 3 GPUs, this machine has " << ngpu;
  makeRanks(firstGpus(3));
  EXPECT_TRUE(peer_->fused());
  check(DType::kBF16, (size_t{1} << 18) + 3, ReduceOrder::kTree, 2);
  check(DType::kF32, (size_t{1} << 16) + 1, ReduceOrder::kRing, 1);
}

TEST_F(PeerAllReduceGpuTest, UnalignedBuffersTakeTheScalarPath) {
  const int ngpu = gpuCount();
  if (ngpu < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << ngpu;
  makeRanks(firstGpus(std::min(ngpu, 8)));
  check(DType::kBF16, 70001, ReduceOrder::kTree, 0, /*offset=*/2);
  check(DType::kF32, 4099, ReduceOrder::kRankOrder, 0, /*offset=*/4);
}

// Sixteen calls queued with no host synchronisation, each on freshly copied inputs (set A or B,
// alternately), each result copied out on the rank's stream before the next call: a rank that ran
// ahead into the next call while a peer still used the last one would show up as a wrong copy.
TEST_F(PeerAllReduceGpuTest, CallsInARowDoNotOverlap) {
  const int ngpu = gpuCount();
  if (ngpu < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << ngpu;
  makeRanks(firstGpus(std::min(ngpu, 8)));
  const int n = peer_->ranks();
  constexpr int kCalls = 16;
  const size_t count = (size_t{1} << 20) + 3, bytes = count * 2;
  const RankInputs sets[2] = {randomRankInputs(rng_, n, count, DType::kBF16, ReduceOrder::kRankOrder, 0),
                              randomRankInputs(rng_, n, count, DType::kBF16, ReduceOrder::kRankOrder, 0)};
  makeBuffers(bytes, 0);
  std::vector<std::vector<std::unique_ptr<DeviceBuffer>>> staged(static_cast<size_t>(n)), copies(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto ur = static_cast<size_t>(r);
    ASSERT_EQ(cudaSetDevice(devices_[ur]), cudaSuccess);
    for (const auto& set : sets) {
      staged[ur].push_back(std::make_unique<DeviceBuffer>(bytes));
      staged[ur].back()->upload(set.inputs[ur].data(), bytes);
    }
    for (int c = 0; c < kCalls; ++c) {
      copies[ur].push_back(std::make_unique<DeviceBuffer>(bytes));
      copies[ur].back()->poison();
    }
  }
  settle();
  for (int c = 0; c < kCalls; ++c) {
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<size_t>(r);
      ASSERT_EQ(cudaSetDevice(devices_[ur]), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(send_[ur]->get(), staged[ur][static_cast<size_t>(c % 2)]->get(), bytes,
                                cudaMemcpyDeviceToDevice, streams_[ur]), cudaSuccess);
    }
    ASSERT_TRUE(peer_->run(sends_.data(), recvs_.data(), count, DType::kBF16, ReduceOrder::kRankOrder, 0,
                           streams_.data()).isOk());
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<size_t>(r);
      ASSERT_EQ(cudaSetDevice(devices_[ur]), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(copies[ur][static_cast<size_t>(c)]->get(), recv_[ur]->get(), bytes,
                                cudaMemcpyDeviceToDevice, streams_[ur]), cudaSuccess);
      ASSERT_EQ(cudaMemsetAsync(recv_[ur]->get(), 0xff, bytes, streams_[ur]), cudaSuccess);
    }
  }
  settle();
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < kCalls; ++c) {
      ASSERT_EQ(cudaSetDevice(devices_[static_cast<size_t>(r)]), cudaSuccess);
      EXPECT_EQ(copies[static_cast<size_t>(r)][static_cast<size_t>(c)]->download(bytes), sets[c % 2].sum)
          << "rank " << r << " call " << c;
    }
  }
}

// Two ranks on one GPU cannot meet through flags safely (both kernels would have to be resident
// at once): they take the copy path, which also runs on a single-GPU machine.
TEST_F(PeerAllReduceGpuTest, RanksSharingAGpuUseCopies) {
  makeRanks({0, 0, 0});
  EXPECT_FALSE(peer_->fused());
  check(DType::kBF16, (size_t{1} << 18) + 7, ReduceOrder::kTree, 1);
  check(DType::kF32, 5, ReduceOrder::kRankOrder, 0);
}

TEST_F(PeerAllReduceGpuTest, CopiesModeGivesTheSameSum) {
  const int ngpu = gpuCount();
  if (ngpu < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << ngpu;
  setenv("DETRACE_PEER_MODE", "copies", 1);
  makeRanks(firstGpus(std::min(ngpu, 8)));
  EXPECT_FALSE(peer_->fused());
  check(DType::kBF16, (size_t{1} << 20) + 5, ReduceOrder::kTree, 0);
}

}  // namespace
}  // namespace detrace::kernels
