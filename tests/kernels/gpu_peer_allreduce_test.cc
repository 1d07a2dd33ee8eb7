// PeerAllReduce across every GPU of the machine (one process), against the CPU twin of the
// fixed-order reduction; skipped with fewer than 2 GPUs.
#include <algorithm>

#include "detrace/kernels/peer_allreduce.h"
#include "kernels_gpu_util.h"
#include "rank_inputs.h"

namespace detrace::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RankInputs;
using testing::randomRankInputs;

class PeerAllReduceGpuTest : public testing::GpuTest {};

TEST_F(PeerAllReduceGpuTest, EveryGpuGetsTheFixedOrderSum) {
  DETRACE_REQUIRE_GPU();
  int ngpu = 0;
  ASSERT_EQ(cudaGetDeviceCount(&ngpu), cudaSuccess);
  if (ngpu < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << ngpu;
  const int n = std::min(ngpu, kMaxReduceRanks);
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r);
  auto peer = PeerAllReduce::create(devices);
  ASSERT_TRUE(peer.isOk()) << peer.status().message();
  std::vector<cudaStream_t> streams(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[static_cast<size_t>(r)], cudaStreamNonBlocking), cudaSuccess);
  }
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (size_t count : {(size_t{1} << 20) + 5, size_t{3}}) {
      SCOPED_TRACE(::testing::Message() << dtypeName(dtype) << " count " << count << " ranks " << n);
      const size_t bytes = count * dtypeSize(dtype);
      const RankInputs data = randomRankInputs(rng_, n, count, dtype, ReduceOrder::kTree, 0);
      const auto& inputs = data.inputs;
      const auto& want = data.sum;
      std::vector<std::unique_ptr<DeviceBuffer>> send, recv;
      std::vector<const void*> sends;
      std::vector<void*> recvs;
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
        send.push_back(std::make_unique<DeviceBuffer>(bytes));
        recv.push_back(std::make_unique<DeviceBuffer>(bytes));
        ASSERT_TRUE(send.back()->ok() && recv.back()->ok());
        send.back()->upload(inputs[static_cast<size_t>(r)].data(), bytes);
        recv.back()->poison();
        sends.push_back(send.back()->get());
        recvs.push_back(recv.back()->get());
      }
      auto settle = [&] {  // the legacy-stream memsets done before the non-blocking streams run
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        }
      };
      settle();
      for (int rep = 0; rep < 2; ++rep) {  // twice: the same bits again
        const Status s = (*peer)->run(sends.data(), recvs.data(), count, dtype, ReduceOrder::kTree, 0,
                                      streams.data());
        ASSERT_TRUE(s.isOk()) << s.message();
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
          ASSERT_EQ(cudaStreamSynchronize(streams[static_cast<size_t>(r)]), cudaSuccess);
          EXPECT_EQ(recv[static_cast<size_t>(r)]->download(bytes), want) << "rank " << r << " run " << rep;
        }
        for (auto& b : recv) b->poison();
        settle();
      }
      // In place is refused, not miscomputed.
      std::vector<void*> aliased(recvs);
      aliased[0] = const_cast<void*>(sends[0]);
      EXPECT_EQ((*peer)->run(sends.data(), aliased.data(), count, dtype, ReduceOrder::kTree, 0,
                             streams.data()).code(),
                ErrorCode::kInvalidArgument);
    }
  }
  for (int r = 0; r < n; ++r) {
    (void)cudaSetDevice(r);
    (void)cudaStreamDestroy(streams[static_cast<size_t>(r)]);
  }
  (void)cudaSetDevice(0);
}

}  // namespace
}  // namespace detrace::kernels
