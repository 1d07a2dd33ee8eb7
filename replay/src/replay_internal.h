// Internals of replay (replay.h): an op loaded from the trace into packed host buffers, and the
// implementations that can re-execute it. Only built with kernels/ (DETRACE_REPLAY_HAVE_KERNELS).
//
// Data flow: loadOp() reads the event and its captured operands (for a collective, from every
// rank's file) and packs them into detrace's layouts (GemmProblem, CollectiveProblem); the impl
// registry (replay_impls.cc) turns a problem into a list of Impl closures, CPU ones
// (replay_cpu.cc) and GPU ones (replay_gpu.cc, replay_nccl.cc); replay.cc runs them, hashes and
// measures the outputs (replay_metrics.h) and builds the result values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <cuda_runtime_api.h>

#include "detrace/base/status.h"
#include "detrace/db/records.h"
#include "detrace/db/run.h"
#include "detrace/kernels/dtype.h"
#include "detrace/replay/replay.h"

namespace detrace::replay::detail {

using Bytes = std::vector<uint8_t>;

// A CUDA runtime call's result as a Status naming the call (replay_gpu.cc).
Status cudaStatus(cudaError_t e, const char* call);
#define DETRACE_REPLAY_CUDA(call) DETRACE_RETURN_IF_ERROR(::detrace::replay::detail::cudaStatus((call), #call))

// db::DType (trace) -> kernels::DType (fp32, fp16, bf16; the loaders only let those through).
inline kernels::DType kernelDType(db::DType t) {
  return t == db::DType::kF32 ? kernels::DType::kF32
         : t == db::DType::kF16 ? kernels::DType::kF16
                                : kernels::DType::kBF16;
}

// D[m,n] = A[m,k] · B[n,k]^T, all packed row-major (kernels/gemm_types.h). For cuBLAS's
// column-major D(m_cb x n_cb) = op(A_cb) op(B_cb): m = n_cb (tokens), n = m_cb, A = op(B_cb)^T,
// B = op(A_cb), and our row-major D is cuBLAS's D with ld = m_cb.
struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  db::DType in = db::DType::kUnknown;
  db::DType out = db::DType::kUnknown;
  Bytes a, b;
  db::Gemm recorded;  // the call as recorded (its algorithm for the `recorded` implementation)
};

// A reducing collective: output = sum over comm ranks of inputs[r][offset, offset + count).
struct CollectiveProblem {
  db::CollOp op = db::CollOp::kAllReduce;
  db::DType dtype = db::DType::kUnknown;
  int nranks = 1;
  int out_rank = 0;         // the comm rank whose output is replayed
  int root = 0;             // kReduce only
  int64_t count = 0;        // output elements
  int64_t offset = 0;       // first input element reduced (reduce-scatter: out_rank * count)
  int64_t send_count = 0;   // elements of each rank's send buffer
  std::vector<Bytes> inputs;  // by comm rank: that rank's captured send buffer
};

// An op ready to replay.
struct LoadedOp {
  ReplayResult header;  // run, rank, seq, op, kind, recorded, output, tokens, notes (no impls)
  std::optional<Bytes> recorded_bytes;      // the recorded output, packed like replay outputs
  std::optional<uint64_t> recorded_digest;  // digest of the packed recorded output
  std::vector<uint64_t> recorded_row_digests;  // per output row, when recorded
  std::vector<uint64_t> input_row_keys;  // per output row: digest of the inputs that make it
  uint64_t shared_input_key = 0;         // digest of what every row shares (a GEMM's weights)
  std::shared_ptr<const GemmProblem> gemm;
  std::shared_ptr<const CollectiveProblem> collective;
};

Result<LoadedOp> loadOp(const db::Run& run, const EventRef& ref);

// One way to execute the op. `run` returns the packed output (shape: LoadedOp::header.output).
struct Impl {
  std::string name;
  std::string description;
  bool gpu = false;
  bool control = false;  // planted defect
  bool once = false;     // deterministic by definition (the fp64 reference): run a single time
  std::string skipped;   // non-empty: cannot run here, and why
  std::function<Result<Bytes>()> run;
};

// Why GPU implementations cannot run here ("" if they can): --no-gpu, no device.
std::string gpuUnavailableReason(bool allow_gpu);
int gpuCount();

// The fp64 reference of the op (one value per output element).
std::vector<double> referenceOf(const LoadedOp& op);

// Every implementation for the op, in report order. `reference` is referenceOf(op).
std::vector<Impl> implsFor(const LoadedOp& op, std::shared_ptr<const std::vector<double>> reference,
                           bool allow_gpu);

// CPU implementations (replay_cpu.cc) and GPU ones (replay_gpu.cc, replay_nccl.cc).
void addCpuGemmImpls(std::shared_ptr<const GemmProblem> p, std::vector<Impl>& out);
void addGpuGemmImpls(std::shared_ptr<const GemmProblem> p, const std::string& unavailable,
                     std::vector<Impl>& out);
// A fixed summation order of a collective: `order` and `start` as in kernels/reduce.h (as
// integers, to keep CUDA headers out of this one); `label` names it ("rank", "ring2", "tree").
struct OrderSpec {
  int order = 0;
  int start = 0;
  std::string label;
};
// The orders of kernels/reduce.h that give different sums for `nranks` ranks (orders equal up to
// the commutativity of + are listed once: for 2 ranks every order is the rank order).
std::vector<OrderSpec> distinctOrders(int nranks);
std::vector<Impl> cpuReduceImpls(std::shared_ptr<const CollectiveProblem> p,
                                 const std::vector<OrderSpec>& orders);
// GPU: one Impl per order, then the planted racy reduction (last).
std::vector<Impl> gpuReduceImpls(std::shared_ptr<const CollectiveProblem> p,
                                 const std::vector<OrderSpec>& orders,
                                 const std::string& unavailable);
Impl ncclImpl(std::shared_ptr<const CollectiveProblem> p, const std::string& unavailable);
// kernels' deterministic all-reduce over nranks local GPUs; AllReduce ops only (else nullopt).
std::optional<Impl> deterministicAllReduceImpl(std::shared_ptr<const CollectiveProblem> p,
                                               const std::string& unavailable);

// Digests (docs/digest.md) of packed buffers: the whole buffer, and each row of `row_bytes`.
uint64_t digestOf(const Bytes& bytes);
std::vector<uint64_t> rowDigestsOf(const Bytes& bytes, int64_t rows, int64_t row_bytes);

// Whether `name` is chosen by the --impl selection `tokens` (exact name, NAME/ prefix, a glob with
// '*', or the groups cpu / gpu / controls).
bool implSelected(const std::vector<std::string>& tokens, const Impl& impl);

}  // namespace detrace::replay::detail
