// Deterministic all-reduce over NCCL, with a one-rank communicator (ncclCommInitAll on device 0):
// the gather and the local fixed-order reduction run for real; bandwidth across GPUs is measured
// on multi-GPU machines elsewhere.
#include "detrace/kernels/allreduce.h"
#include "kernels_gpu_util.h"

#if defined(DETRACE_HAVE_NCCL)

namespace detrace::kernels {
namespace {

using testing::DeviceBuffer;

class AllReduceGpuTest : public testing::GpuTest {};

TEST_F(AllReduceGpuTest, OneRankEqualsFixedOrderReduceCpu) {
  DETRACE_REQUIRE_GPU();
  ncclComm_t comm = nullptr;
  int dev = 0;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, &dev), ncclSuccess);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const size_t count = 12345;
    const size_t bytes = count * dtypeSize(dtype);
    const auto host = randomBytes(bytes);
    std::vector<unsigned char> finite(bytes);
    for (size_t i = 0; i < count; ++i) {  // random bits, but finite values
      const float v = static_cast<float>(static_cast<int>(host[i % bytes]) - 128) / 7.0f;
      storeFromFloat(finite.data(), i, dtype, v);
    }
    DeviceBuffer send(bytes), recv(bytes);
    const size_t ws_bytes = deterministicAllReduceWorkspaceBytes(count, dtype, 1);
    DeviceBuffer ws(ws_bytes);
    ASSERT_TRUE(send.ok() && recv.ok() && ws.ok());
    send.upload(finite.data(), bytes);
    recv.poison();
    const Status s = deterministicAllReduce(send.get(), recv.get(), count, dtype,
                                            ReduceOrder::kTree, 0, comm, nullptr, ws.get(),
                                            ws_bytes);
    ASSERT_TRUE(s.isOk()) << s.message();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<unsigned char> want(bytes);
    const void* in[] = {finite.data()};
    ASSERT_TRUE(fixedOrderReduceCpu(in, 1, want.data(), count, dtype, ReduceOrder::kTree, 0).isOk());
    EXPECT_EQ(recv.download(bytes), want) << dtypeName(dtype);
    EXPECT_EQ(deterministicAllReduce(send.get(), recv.get(), count, dtype, ReduceOrder::kTree, 0,
                                     comm, nullptr, ws.get(), ws_bytes - 1)
                  .code(),
              ErrorCode::kInvalidArgument);
  }
  (void)ncclCommDestroy(comm);
}

}  // namespace
}  // namespace detrace::kernels

#endif  // DETRACE_HAVE_NCCL
