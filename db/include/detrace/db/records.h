// The trace definition shared by recording and analysis: the value types that TraceWriter stores
// and TraceReader returns. Each field maps to one column of the schema (db/src/schema.cc), where
// its meaning is documented. Integer fields use -1 for "unknown / not applicable" (stored as NULL).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace detrace::db {

inline constexpr int64_t kUnset = -1;

// What an event is. Stored as events.kind; values are part of the on-disk format.
enum class EventKind : int32_t {
  kKernel = 1,      // a kernel launch (runtime, driver, cooperative or from a CUDA graph)
  kMemcpy = 2,      // a memory copy
  kMemset = 3,      // a memory set
  kCollective = 4,  // an NCCL collective or point-to-point call (details in collectives)
  kGemm = 5,        // a cuBLAS/cuBLASLt matmul (details in gemms)
  kMarker = 6,      // an NVTX range or mark, or a user step marker (details in markers)
  kSync = 7,        // a host synchronisation (stream/event/device synchronize)
  kOther = 8,
};
const char* eventKindName(EventKind kind);
inline constexpr std::array<EventKind, 8> kAllEventKinds = {
    EventKind::kKernel, EventKind::kMemcpy, EventKind::kMemset, EventKind::kCollective,
    EventKind::kGemm,   EventKind::kMarker, EventKind::kSync,   EventKind::kOther};

// How a kernel was launched. Stored as events.launch_api.
enum class LaunchApi : int32_t {
  kUnknown = 0,
  kRuntime = 1,       // cudaLaunchKernel and friends
  kDriver = 2,        // cuLaunchKernel
  kDriverEx = 3,      // cuLaunchKernelEx / cudaLaunchKernelExC
  kCooperative = 4,   // cooperative launches
  kGraph = 5,         // a kernel node replayed from a CUDA graph
};

// Element types of operands and GEMMs. Stored as small integers; values are on-disk format.
enum class DType : int32_t {
  kUnknown = 0, kF32 = 1, kF16 = 2, kBF16 = 3, kF64 = 4, kI8 = 5, kU8 = 6, kI32 = 7, kI64 = 8,
  kF8E4M3 = 9, kF8E5M2 = 10,
};
const char* dtypeName(DType dtype);
int dtypeSize(DType dtype);  // bytes per element; 0 for kUnknown

// NCCL operations. Stored as collectives.op.
enum class CollOp : int32_t {
  kUnknown = 0, kAllReduce = 1, kReduceScatter = 2, kAllGather = 3, kBroadcast = 4, kReduce = 5,
  kSend = 6, kRecv = 7, kAllToAll = 8, kGather = 9, kScatter = 10,
};
const char* collOpName(CollOp op);

// Reduction operators. Stored as collectives.redop; 0..4 are NCCL's built-in ones (ncclRedOp_t).
enum class RedOp : int32_t {
  kNone = -1, kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4,
  kPreMulSum = 5,      // made by ncclRedOpCreatePreMulSum: each input times a scalar, then summed
  kUnknownCustom = 6,  // a custom operator the tracer did not see made (e.g. before it loaded)
};
const char* redOpName(RedOp op);

enum class OperandRole : int32_t { kInput = 1, kOutput = 2, kInOut = 3 };
const char* operandRoleName(OperandRole role);

enum class MarkerKind : int32_t { kRangeStart = 1, kRangeEnd = 2, kInstant = 3, kStep = 4 };

// Kernel launch configuration (events.grid_* ... events.launch_api). Only for kernels.
struct LaunchInfo {
  std::array<int32_t, 3> grid{-1, -1, -1};
  std::array<int32_t, 3> block{-1, -1, -1};
  int32_t smem_static = -1;
  int32_t smem_dynamic = -1;
  int32_t registers = -1;
  LaunchApi api = LaunchApi::kUnknown;

  bool operator==(const LaunchInfo&) const = default;
};

// One row of `events`. seq is assigned by the writer: dense 0..n-1 per rank.
struct Event {
  int64_t seq = kUnset;
  EventKind kind = EventKind::kOther;
  int64_t name = kUnset;  // strings.id
  int64_t stream = kUnset;  // streams.id
  int32_t device = -1;
  int64_t cpu_ns = kUnset;
  int64_t gpu_start_ns = kUnset;
  int64_t gpu_end_ns = kUnset;
  int64_t correlation_id = kUnset;
  int64_t graph_id = kUnset;
  int64_t graph_node_id = kUnset;
  int64_t parent_seq = kUnset;
  bool has_launch = false;  // launch is meaningful (kernels only)
  LaunchInfo launch;

  bool operator==(const Event&) const = default;
};

struct Collective {
  CollOp op = CollOp::kUnknown;
  DType dtype = DType::kUnknown;
  int64_t count = 0;
  RedOp redop = RedOp::kNone;
  int32_t root = -1;
  int32_t peer = -1;
  int64_t comm_id = kUnset;
  int32_t comm_rank = -1;
  int32_t comm_nranks = -1;
  int64_t comm_seq = kUnset;
  int64_t algo = kUnset;   // strings.id, e.g. "Ring"
  int64_t proto = kUnset;  // strings.id, e.g. "LL128"
  int32_t channels = -1;
  int64_t send_addr = 0;
  int64_t recv_addr = 0;
  int64_t group_id = kUnset;
  // PreMulSum's scalar when NCCL took it from the host at the operator's creation
  // (ncclScalarHostImmediate): its bytes, in the collective's dtype, little-endian and
  // zero-extended to 64 bits. Absent for other operators and for a scalar in device memory.
  bool has_redop_scalar = false;
  uint64_t redop_scalar = 0;

  bool operator==(const Collective&) const = default;
};

// The reduction as people read it: redOpName, with PreMulSum's scalar as a number of the
// collective's dtype ("premulsum(0.25)", "premulsum(unrecorded scalar)"); "unknown(N)" for a
// value this detrace does not name.
std::string redOpText(const Collective& c);
// A GEMM's epilogue (Gemm::epilogue) as cublasLt.h names it, lower case and without its prefix
// ("default", "bias", "gelu_aux_bias", ...); "unrecorded" for kUnset, the number for a value this
// detrace does not know.
std::string epilogueText(int32_t epilogue);

struct Gemm {
  int64_t api = kUnset;  // strings.id, e.g. "cublasLtMatmul"
  int32_t trans_a = 0, trans_b = 0;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  int32_t batch_count = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;
  DType a_dtype = DType::kUnknown, b_dtype = DType::kUnknown;
  DType c_dtype = DType::kUnknown, d_dtype = DType::kUnknown;
  int64_t compute_type = kUnset;  // strings.id, e.g. "CUBLAS_COMPUTE_32F"
  int32_t algo_id = -1;
  int32_t tile = -1;
  int32_t split_k = -1;
  int32_t reduction_scheme = -1;
  int32_t stages = -1;
  int32_t swizzle = -1;
  int32_t custom_option = -1;
  int32_t algo_source = 0;  // 0 unknown, 1 given by the caller, 2 chosen by cuBLASLt's heuristic
  int64_t a_addr = 0, b_addr = 0, c_addr = 0, d_addr = 0;
  // cublasLtEpilogue_t of a cuBLASLt matmul (1 none, 4 bias, 32 GeLU, ...); 1 for the classic
  // cuBLAS entry points, which have none; kUnset where not recorded (traces written before it).
  int32_t epilogue = kUnset;

  bool operator==(const Gemm&) const = default;
};

struct Marker {
  MarkerKind marker_kind = MarkerKind::kInstant;
  int64_t domain = kUnset;  // strings.id
  int64_t value = kUnset;   // step number for kStep, range id for ranges

  bool operator==(const Marker&) const = default;
};

// A tensor an event read or wrote, with its fingerprints and optionally its bytes.
struct Operand {
  int64_t id = kUnset;  // assigned by the writer
  int64_t seq = kUnset;  // events.seq of the op
  int32_t slot = 0;
  int64_t name = kUnset;  // strings.id: "A", "B", "D", "bias", "aux", "send", "recv", ...
  OperandRole role = OperandRole::kInput;
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;
  int64_t address = 0;
  int64_t bytes = 0;
  int64_t rows = 0;
  int64_t row_bytes = 0;
  int64_t row_stride = 0;
  bool has_digest = false;
  uint64_t digest = 0;
  std::vector<uint64_t> row_digests;
  // Raw captured bytes. The writer compresses them; the reader returns them only when asked.
  std::vector<uint8_t> capture;
  int64_t capture_bytes = 0;  // uncompressed size, 0 if nothing was captured

  bool operator==(const Operand&) const = default;
};

// A deep-window kernel launch's parameters: their layout and bytes. The memory the parameters
// point into is digested before and after the launch and stored as the event's operands
// (docs/architecture.md, "Deep window").
struct LaunchParams {
  int64_t seq = kUnset;  // events.seq of the kernel launch
  std::string layout;    // [[offset,size],...] per parameter (tracer's layoutText)
  std::vector<uint8_t> bytes;  // the parameters packed by that layout

  bool operator==(const LaunchParams&) const = default;
};

// A library op as one launch of an executable CUDA graph replayed it. The call (a GEMM or
// collective) was captured into the graph once and recorded then, without fingerprints: its
// template. Every recorded launch of the graph adds an event per captured op (same kind and
// details, with its own fingerprints), placed among that launch's kernels, and a row here.
struct GraphOp {
  int64_t seq = kUnset;           // events.seq of the op as this launch replayed it
  int64_t template_seq = kUnset;  // events.seq of the captured call; kUnset if it is not known
  int64_t replay = kUnset;        // launch number of the executable graph (0 = first recorded)
  int64_t graph_exec = 0;         // the CUgraphExec value in the recorded process

  bool operator==(const GraphOp&) const = default;
};

struct StreamInfo {
  int64_t id = kUnset;
  int64_t handle = 0;  // the CUstream value in the recorded process
  int32_t device = -1;
  int32_t priority = 0;
  int64_t name = kUnset;  // strings.id

  bool operator==(const StreamInfo&) const = default;
};

// The recorded process's place in the run. One row of `ranks` per file.
struct RankInfo {
  int32_t rank = -1;
  int32_t world_size = -1;
  int32_t local_rank = -1;
  int32_t device = -1;
  int64_t pid = 0;
  std::string host;
  std::string gpu_name;
  std::string gpu_uuid;

  bool operator==(const RankInfo&) const = default;
};

}  // namespace detrace::db
