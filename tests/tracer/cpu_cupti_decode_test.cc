// cupti_decode.h: CUPTI's callback parameters and activity records, built here as CUPTI lays them
// out (its own headers), read into the tracer's terms. The GPU suites check the same code against
// CUPTI's real callbacks and records; these check every launch entry point and record kind,
// including the ones no GPU test happens to call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../db/test_util.h"
#include "detrace/db/writer.h"
#include "detrace/tracer/cupti_decode.h"

namespace detrace::tracer {
namespace {

template <typename T>
T* fakeHandle(uint64_t v) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(v));
}

struct Entry {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
  db::LaunchApi api;
  bool graph;
};

// Every launch entry point the tracer subscribes to (launch_callback_ids.h), with what it means.
const std::vector<Entry>& launchEntries() {
  static const std::vector<Entry> entries = {
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, db::LaunchApi::kRuntime, false},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, db::LaunchApi::kRuntime, false},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, db::LaunchApi::kDriverEx, false},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060, db::LaunchApi::kDriverEx,
       false},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
       db::LaunchApi::kCooperative, false},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
       db::LaunchApi::kCooperative, false},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, db::LaunchApi::kGraph, true},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000, db::LaunchApi::kGraph, true},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, db::LaunchApi::kDriver, false},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, db::LaunchApi::kDriver, false},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, db::LaunchApi::kDriverEx, false},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, db::LaunchApi::kDriverEx, false},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, db::LaunchApi::kCooperative,
       false},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
       db::LaunchApi::kCooperative, false},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, db::LaunchApi::kGraph, true},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, db::LaunchApi::kGraph, true},
  };
  return entries;
}

TEST(CuptiDecode, EveryLaunchEntryPointIsClassified) {
  for (const Entry& e : launchEntries()) {
    LaunchKind k;
    k.api = db::LaunchApi::kUnknown;
    ASSERT_TRUE(classifyLaunch(e.domain, e.cbid, k)) << "domain " << e.domain << " cbid " << e.cbid;
    EXPECT_EQ(k.api, e.api) << "cbid " << e.cbid;
    EXPECT_EQ(k.graph, e.graph) << "cbid " << e.cbid;
  }
}

TEST(CuptiDecode, CallsThatLaunchNothingAreNotLaunches) {
  const std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> others = {
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2},
      // A launch's id number in another domain names something else there.
      {CUPTI_CB_DOMAIN_RESOURCE, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel},
      {CUPTI_CB_DOMAIN_NVTX, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000},
  };
  for (const auto& [domain, cbid] : others) {
    LaunchKind k;
    EXPECT_FALSE(classifyLaunch(domain, cbid, k)) << "domain " << domain << " cbid " << cbid;
    uint64_t params[16];  // whatever the call's parameters are: nothing is read from them
    std::fill(std::begin(params), std::end(params), 0x5a5a5a5a5a5a5a5aull);
    const LaunchTarget t = launchTarget(domain, cbid, params);
    EXPECT_EQ(t.stream, 0);
    EXPECT_EQ(t.graph_exec, 0u);
    EXPECT_EQ(t.function, nullptr);
  }
}

// Each entry point's parameters, laid out as CUPTI passes them, with fresh random handles: the
// target names exactly the stream, function and executable graph given.
TEST(CuptiDecode, LaunchTargetsReadEachEntryPointsOwnParameters) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    const uint64_t stream = rng() | 1, function = rng() | 2, exec = rng() | 4;
    auto* s = fakeHandle<CUstream_st>(stream);
    auto* f = fakeHandle<CUfunc_st>(function);
    const void* host_fn = fakeHandle<const char>(function);

    cudaLaunchKernel_v7000_params rt{};
    rt.func = host_fn;
    rt.stream = s;
    cudaLaunchCooperativeKernel_v9000_params coop{};
    coop.func = host_fn;
    coop.stream = s;
    cudaLaunchConfig_t rt_config{};
    rt_config.stream = s;
    cudaLaunchKernelExC_v11060_params rt_ex{};
    rt_ex.config = &rt_config;
    rt_ex.func = host_fn;
    cudaGraphLaunch_v10000_params rt_graph{};
    rt_graph.graphExec = fakeHandle<CUgraphExec_st>(exec);
    rt_graph.stream = s;
    cuLaunchKernel_params drv{};
    drv.f = f;
    drv.hStream = s;
    cuLaunchCooperativeKernel_params drv_coop{};
    drv_coop.f = f;
    drv_coop.hStream = s;
    CUlaunchConfig drv_config{};
    drv_config.hStream = s;
    cuLaunchKernelEx_params drv_ex{};
    drv_ex.config = &drv_config;
    drv_ex.f = f;
    cuGraphLaunch_params drv_graph{};
    drv_graph.hGraph = fakeHandle<CUgraphExec_st>(exec);
    drv_graph.hStream = s;

    for (const Entry& e : launchEntries()) {
      const bool runtime = e.domain == CUPTI_CB_DOMAIN_RUNTIME_API;
      const void* params = nullptr;
      switch (e.api) {
        case db::LaunchApi::kRuntime: params = &rt; break;
        case db::LaunchApi::kCooperative: params = runtime ? static_cast<const void*>(&coop) : &drv_coop; break;
        case db::LaunchApi::kDriverEx: params = runtime ? static_cast<const void*>(&rt_ex) : &drv_ex; break;
        case db::LaunchApi::kGraph: params = runtime ? static_cast<const void*>(&rt_graph) : &drv_graph; break;
        case db::LaunchApi::kDriver: params = &drv; break;
        default: FAIL() << "no parameters for api " << static_cast<int>(e.api);
      }
      const LaunchTarget t = launchTarget(e.domain, e.cbid, params);
      EXPECT_EQ(t.stream, static_cast<int64_t>(stream)) << "cbid " << e.cbid;
      if (e.graph) {
        EXPECT_EQ(t.graph_exec, exec) << "cbid " << e.cbid;
        EXPECT_EQ(t.function, nullptr) << "cbid " << e.cbid;
      } else {
        EXPECT_EQ(t.graph_exec, 0u) << "cbid " << e.cbid;
        EXPECT_EQ(t.function, reinterpret_cast<const void*>(static_cast<uintptr_t>(function))) << "cbid " << e.cbid;
      }
    }
  }
}

TEST(CuptiDecode, AnExLaunchWithoutAConfigHasAFunctionButNoStream) {
  int fn = 0;
  cudaLaunchKernelExC_v11060_params rt_ex{};
  rt_ex.func = &fn;
  cuLaunchKernelEx_params drv_ex{};
  drv_ex.f = reinterpret_cast<CUfunction>(&fn);
  for (const auto& [domain, cbid, params] :
       {std::tuple{CUPTI_CB_DOMAIN_RUNTIME_API, CUpti_CallbackId{CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060},
                   static_cast<const void*>(&rt_ex)},
        std::tuple{CUPTI_CB_DOMAIN_DRIVER_API, CUpti_CallbackId{CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx},
                   static_cast<const void*>(&drv_ex)}}) {
    const LaunchTarget t = launchTarget(domain, cbid, params);
    EXPECT_EQ(t.stream, 0);
    EXPECT_EQ(t.function, static_cast<const void*>(&fn));
  }
  const LaunchTarget none =
      launchTarget(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, nullptr);
  EXPECT_EQ(none.stream, 0);
  EXPECT_EQ(none.function, nullptr);
}

TEST(CuptiDecode, AZeroStreamIsTheThreadsOwnOnlyForPerThreadGraphLaunches) {
  EXPECT_EQ(launchStream(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000, 0),
            CU_STREAM_PER_THREAD);
  EXPECT_EQ(launchStream(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, 0),
            CU_STREAM_PER_THREAD);
  EXPECT_EQ(launchStream(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, 0), nullptr);
  EXPECT_EQ(launchStream(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, 0), nullptr);
  // The driver's _ptsz id number read as a runtime id is another function: no translation.
  EXPECT_EQ(launchStream(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, 0), nullptr);
  const int64_t handle = 0x7f0012345678;
  EXPECT_EQ(launchStream(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, handle),
            reinterpret_cast<CUstream>(handle));
}

class CuptiRecords : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = db::TraceWriter::create(dir_.file("decode.detrace"));
    ASSERT_TRUE(w.isOk()) << w.status().message();
    writer_ = std::move(w).value();
  }
  db::TraceWriter& w() { return *writer_; }

  testing::TempDir dir_;
  std::unique_ptr<db::TraceWriter> writer_;
  std::mt19937_64 rng_{std::random_device{}()};
};

TEST_F(CuptiRecords, AKernelRecordGivesItsLaunchTimesAndDemangledName) {
  for (int trial = 0; trial < 50; ++trial) {
    CUpti_ActivityKernel10 k{};
    k.kind = (trial % 2) ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL : CUPTI_ACTIVITY_KIND_KERNEL;
    k.correlationId = static_cast<uint32_t>(rng_());
    k.start = rng_() >> 2;
    k.end = k.start + (rng_() >> 40);
    k.streamId = static_cast<uint32_t>(rng_() % 1000);
    k.deviceId = static_cast<uint32_t>(rng_() % 8);
    k.contextId = static_cast<uint32_t>(rng_() % 16 + 1);
    k.gridX = static_cast<int32_t>(rng_() % 65535 + 1);
    k.gridY = static_cast<int32_t>(rng_() % 64 + 1);
    k.gridZ = static_cast<int32_t>(rng_() % 4 + 1);
    k.blockX = static_cast<int32_t>(rng_() % 1024 + 1);
    k.blockY = 1;
    k.blockZ = static_cast<int32_t>(rng_() % 2 + 1);
    k.staticSharedMemory = static_cast<int32_t>(rng_() % 49152);
    k.dynamicSharedMemory = static_cast<int32_t>(rng_() % 200000);
    k.registersPerThread = static_cast<uint16_t>(rng_() % 255 + 1);
    const int shape = trial % 3;  // plain, cooperative, replayed from a graph
    k.launchType = shape == 1 ? CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE : CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
    k.graphId = shape == 2 ? static_cast<uint32_t>(rng_() % 100 + 1) : 0;
    k.graphNodeId = shape == 2 ? rng_() >> 1 : 0;
    // Each trial its own function, so the name cache cannot answer from an earlier trial.
    const std::string fn = "gemm_tile_" + std::to_string(trial);
    const std::string mangled = "_Z" + std::to_string(fn.size()) + fn + "Pfi";
    k.name = mangled.c_str();

    Activity a;
    ASSERT_TRUE(decodeActivity(w(), reinterpret_cast<const CUpti_Activity*>(&k), a));
    EXPECT_FALSE(a.own);
    // Random ids jump across the whole 32-bit range, as no real calls do: only their low 32 bits
    // are theirs (correlation_ids.h unwraps the rest).
    EXPECT_EQ(static_cast<uint32_t>(a.correlation_id), k.correlationId);
    EXPECT_EQ(a.kind, db::EventKind::kKernel);
    EXPECT_EQ(a.name, w().intern(fn + "(float*, int)"));
    EXPECT_EQ(a.stream, w().stream(k.streamId, static_cast<int32_t>(k.deviceId)));
    EXPECT_EQ(a.device, static_cast<int32_t>(k.deviceId));
    EXPECT_EQ(a.context, k.contextId);
    EXPECT_EQ(a.gpu_start_ns, static_cast<int64_t>(k.start));
    EXPECT_EQ(a.gpu_end_ns, static_cast<int64_t>(k.end));
    ASSERT_TRUE(a.has_launch);
    EXPECT_EQ(a.launch.grid[0], k.gridX);
    EXPECT_EQ(a.launch.grid[1], k.gridY);
    EXPECT_EQ(a.launch.grid[2], k.gridZ);
    EXPECT_EQ(a.launch.block[0], k.blockX);
    EXPECT_EQ(a.launch.block[1], k.blockY);
    EXPECT_EQ(a.launch.block[2], k.blockZ);
    EXPECT_EQ(a.launch.smem_static, k.staticSharedMemory);
    EXPECT_EQ(a.launch.smem_dynamic, k.dynamicSharedMemory);
    EXPECT_EQ(a.launch.registers, k.registersPerThread);
    if (shape == 2) {
      EXPECT_EQ(a.graph_id, static_cast<int64_t>(k.graphId));
      EXPECT_EQ(a.graph_node_id, static_cast<int64_t>(k.graphNodeId));
      EXPECT_EQ(a.launch.api, db::LaunchApi::kGraph);
    } else {
      EXPECT_EQ(a.graph_id, db::kUnset);
      EXPECT_EQ(a.graph_node_id, db::kUnset);
      EXPECT_EQ(a.launch.api, shape == 1 ? db::LaunchApi::kCooperative : db::LaunchApi::kUnknown);
    }
  }
}

TEST_F(CuptiRecords, ANameThatDoesNotDemangleIsKeptAndNoNameIsNamed) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  const std::string c_name = "vector_add_" + std::to_string(rng_() % 100000);  // extern "C": not mangled
  k.name = c_name.c_str();
  Activity a;
  ASSERT_TRUE(decodeActivity(w(), reinterpret_cast<const CUpti_Activity*>(&k), a));
  EXPECT_EQ(a.name, w().intern(c_name));
  k.name = nullptr;
  Activity b;
  ASSERT_TRUE(decodeActivity(w(), reinterpret_cast<const CUpti_Activity*>(&k), b));
  EXPECT_EQ(b.name, w().intern("<unnamed kernel>"));
}

TEST_F(CuptiRecords, TheTracersOwnKernelsAreKeptOnlyInsideGraphs) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = "detrace_digest_many";
  k.correlationId = static_cast<uint32_t>(rng_());
  k.start = rng_() >> 2;
  k.end = k.start + 1000;
  k.graphId = 0;
  Activity eager;
  EXPECT_FALSE(decodeActivity(w(), reinterpret_cast<const CUpti_Activity*>(&k), eager));
  k.graphId = 7;
  k.graphNodeId = 99;
  Activity captured;
  ASSERT_TRUE(decodeActivity(w(), reinterpret_cast<const CUpti_Activity*>(&k), captured));
  EXPECT_TRUE(captured.own);
  EXPECT_EQ(static_cast<uint32_t>(captured.correlation_id), k.correlationId);
  EXPECT_EQ(captured.gpu_start_ns, static_cast<int64_t>(k.start));
  EXPECT_EQ(captured.gpu_end_ns, static_cast<int64_t>(k.end));
  EXPECT_EQ(captured.name, db::kUnset);  // never written: no name interned for it
  EXPECT_FALSE(captured.has_launch);
}

TEST_F(CuptiRecords, CopiesAndSetsAreNamedByTheirKind) {
  const std::vector<std::pair<uint8_t, std::string>> kinds = {
      {CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, "memcpy HtoD"}, {CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, "memcpy DtoH"},
      {CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, "memcpy DtoD"}, {CUPTI_ACTIVITY_MEMCPY_KIND_PTOP, "memcpy PtoP"},
      {CUPTI_ACTIVITY_MEMCPY_KIND_HTOH, "memcpy HtoH"}, {CUPTI_ACTIVITY_MEMCPY_KIND_HTOA, "memcpy"}};
  for (const auto& [copy_kind, name] : kinds) {
    CUpti_ActivityMemcpy6 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = copy_kind;
    m.correlationId = static_cast<uint32_t>(rng_());
    m.start = rng_() >> 2;
    m.end = m.start + 5;
    m.streamId = static_cast<uint32_t>(rng_() % 100);
    m.deviceId = 1;
    m.contextId = 5;
    const bool in_graph = copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    m.graphId = in_graph ? 3 : 0;
    m.graphNodeId = in_graph ? 12345 : 0;
    Activity a;
    ASSERT_TRUE(decodeActivity(w(), reinterpret_cast<const CUpti_Activity*>(&m), a));
    EXPECT_EQ(a.kind, db::EventKind::kMemcpy);
    EXPECT_EQ(a.name, w().intern(name));
    EXPECT_EQ(static_cast<uint32_t>(a.correlation_id), m.correlationId);
    EXPECT_EQ(a.stream, w().stream(m.streamId, 1));
    EXPECT_EQ(a.context, 5u);
    EXPECT_EQ(a.gpu_start_ns, static_cast<int64_t>(m.start));
    EXPECT_EQ(a.gpu_end_ns, static_cast<int64_t>(m.end));
    EXPECT_EQ(a.graph_id, in_graph ? 3 : db::kUnset);
    EXPECT_EQ(a.graph_node_id, in_graph ? 12345 : db::kUnset);
    EXPECT_FALSE(a.has_launch);
  }
  CUpti_ActivityMemset4 s{};
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.correlationId = static_cast<uint32_t>(rng_());
  s.start = 10;
  s.end = 20;
  s.streamId = 4;
  s.deviceId = 0;
  s.contextId = 6;
  s.graphId = 2;
  s.graphNodeId = 8;
  Activity a;
  ASSERT_TRUE(decodeActivity(w(), reinterpret_cast<const CUpti_Activity*>(&s), a));
  EXPECT_EQ(a.kind, db::EventKind::kMemset);
  EXPECT_EQ(a.name, w().intern("memset"));
  EXPECT_EQ(static_cast<uint32_t>(a.correlation_id), s.correlationId);
  EXPECT_EQ(a.stream, w().stream(4, 0));
  EXPECT_EQ(a.context, 6u);
  EXPECT_EQ(a.graph_id, 2);
  EXPECT_EQ(a.graph_node_id, 8);
}

TEST_F(CuptiRecords, KindsTheTracerDoesNotRecordAreRefused) {
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_MARKER,
                                  CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_INVALID}) {
    CUpti_ActivityKernel10 rec{};  // large enough for any kind's header
    rec.kind = kind;
    Activity a;
    EXPECT_FALSE(decodeActivity(w(), reinterpret_cast<const CUpti_Activity*>(&rec), a)) << "kind " << kind;
  }
}

}  // namespace
}  // namespace detrace::tracer
