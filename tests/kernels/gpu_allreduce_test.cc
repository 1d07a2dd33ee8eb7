// Deterministic all-reduce over NCCL: with a one-rank communicator on any GPU machine, and across
// every GPU of a multi-GPU machine (one thread per rank), against the CPU twin of the fixed-order
// reduction. Bandwidth is bench/kernels/bench_allreduce's.
#include <thread>

#include "detrace/kernels/allreduce.h"
#include "kernels_gpu_util.h"
#include "rank_inputs.h"

#if defined(DETRACE_HAVE_NCCL)

namespace detrace::kernels {
namespace {

using testing::DeviceBuffer;
using testing::RankInputs;
using testing::randomRankInputs;

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

// Every rank of a communicator over all GPUs gets the CPU twin's fixed-order sum of all ranks'
// inputs, bit for bit: counts with and without a remainder (count % nranks), out of place and in
// place, fp32 and bf16, a non-trivial order, both ways of moving the bytes.
TEST_F(AllReduceGpuTest, EveryGpuGetsTheFixedOrderSum) {
  DETRACE_REQUIRE_GPU();
  int ngpu = 0;
  ASSERT_EQ(cudaGetDeviceCount(&ngpu), cudaSuccess);
  if (ngpu < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << ngpu;
  const int n = std::min(ngpu, kMaxReduceRanks);
  std::vector<ncclComm_t> comms(static_cast<size_t>(n), nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess);
  for (AllReduceAlgo algo : {AllReduceAlgo::kSliced, AllReduceAlgo::kGather}) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (size_t count : {size_t{1} << 20, size_t{12345}, size_t{1}}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtypeName(dtype) << " count " << count << " in place "
                                        << in_place << " ranks " << n << " algo "
                                        << static_cast<int>(algo));
        const size_t bytes = count * dtypeSize(dtype);
        const RankInputs data = randomRankInputs(rng_, n, count, dtype, ReduceOrder::kRing, 1);
        const auto& inputs = data.inputs;
        const auto& want = data.sum;
        std::vector<std::vector<unsigned char>> got(static_cast<size_t>(n));
        std::vector<std::string> errors(static_cast<size_t>(n));
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r) {
          threads.emplace_back([&, r] {
            const auto i = static_cast<size_t>(r);
            if (cudaSetDevice(r) != cudaSuccess) return void(errors[i] = "cudaSetDevice");
            DeviceBuffer send(bytes), recv(bytes);
            const size_t ws_bytes = deterministicAllReduceWorkspaceBytes(count, dtype, n, algo);
            DeviceBuffer ws(ws_bytes);
            if (!send.ok() || !recv.ok() || !ws.ok()) return void(errors[i] = "cudaMalloc");
            send.upload(inputs[i].data(), bytes);
            recv.poison();
            void* out = in_place ? send.get() : recv.get();
            const Status s = deterministicAllReduce(send.get(), out, count, dtype, ReduceOrder::kRing,
                                                    1, comms[i], nullptr, ws.get(), ws_bytes, algo);
            if (!s.isOk()) return void(errors[i] = s.message());
            if (cudaDeviceSynchronize() != cudaSuccess) return void(errors[i] = "sync");
            got[i] = in_place ? send.download(bytes) : recv.download(bytes);
          });
        }
        for (auto& t : threads) t.join();
        for (int r = 0; r < n; ++r) {
          const auto i = static_cast<size_t>(r);
          ASSERT_EQ(errors[i], "") << "rank " << r;
          EXPECT_EQ(got[i], want) << "rank " << r;
        }
      }
    }
  }
  }
  for (ncclComm_t c : comms) (void)ncclCommDestroy(c);
  (void)cudaSetDevice(0);
}

}  // namespace
}  // namespace detrace::kernels

#endif  // DETRACE_HAVE_NCCL
