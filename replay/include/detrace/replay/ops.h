// RankOps: one rank's events reduced to what comparing runs needs: for every event an alignment
// key (what the op *is*), a choice signature (which kernel or algorithm *ran* it), and fingerprints
// of its inputs and outputs where the recorder took them.
//
// Memory: a diff holds two of these per rank at a time, so they are kept compact. An event costs
// one 24-byte OpRecord; only library ops (GEMMs, collectives) and fingerprinted ops carry an
// OpExtra; a kernel's choice comes from a per-name table. Per-row digests, which only batch-size
// mode compares, are loaded only when asked for (KeyOptions::rows), into one flat array.
//
// Windows: a RankLoader reads a rank a chunk of events at a time and forgets the events the diff
// is done with, so a RankOps may hold only the events [base, end()) of its rank. Indices stored in
// the records (OpRecord::extra, OpExtra::detail, rows, RowOperand) count from the rank's start;
// the accessors below map them into the window. What the forgotten events still tell (the NVTX
// ranges open, the last GEMM, the kernels since the last fingerprinted op) is kept in `prelude`.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "detrace/base/status.h"
#include "detrace/db/reader.h"

namespace detrace::replay {

// Which GEMM dimension holds the tokens (it differs between batch sizes). cuBLAS is column-major,
// so PyTorch's y = x W^T puts the tokens in n; row-major callers of cuBLASLt put them in m.
enum class BatchDim { kNone, kM, kN };

struct KeyOptions {
  // Batch-size mode: GEMM keys leave out the token dimension and collective keys their count, so
  // bs=1 and bs=64 runs align op for op.
  BatchDim batch_dim = BatchDim::kNone;
  // Load the operands' per-row digests (batch-size mode compares rows).
  bool rows = false;
  // GEMM keys include a cuBLASLt epilogue; off where either run was recorded before epilogues were
  // (its GEMMs read as unrecorded), so that its fused GEMMs still pair with the other run's.
  bool epilogues = true;
};

// One event. Its sequence number is base + its index in RankOps::ops (sequence numbers are dense).
struct OpRecord {
  uint64_t key = 0;     // alignment key: kind + kernel name family, or op + shape class
  int32_t name = 0;     // strings id (kernel name, API or marker text); 0 = none
  int32_t parent = -1;  // seq of the library op that launched it
  int32_t extra = -1;   // its OpExtra (library ops and fingerprinted ops): RankOps::extra(), or -1
  uint8_t kind_ = static_cast<uint8_t>(db::EventKind::kOther);  // a db::EventKind, in one byte
  bool anchor = false;  // a library op (GEMM, collective): the alignment's fixed points

  db::EventKind kind() const { return static_cast<db::EventKind>(kind_); }
};
static_assert(sizeof(OpRecord) == 24, "one OpRecord per event: keep it small");

// What only library ops and fingerprinted ops have.
struct OpExtra {
  uint64_t choice = 0;  // library ops: the cuBLASLt algorithm / NCCL algo+proto+channels
  uint64_t inputs = 0, outputs = 0;  // combined digests of the input and output operands
  int32_t detail = -1;  // the GEMM's or collective's number in its rank (RankOps::gemm(), ...)
  int32_t rows_begin = 0, rows_end = 0;  // its operands: RankOps::rowOperand() (KeyOptions::rows)
  bool has_inputs = false, has_outputs = false;
};

// The GEMM fields that keys, choices and reports use.
struct GemmInfo {
  int64_t m = 0, n = 0, k = 0;
  int32_t api = 0;  // strings id
  int32_t batch_count = 1;
  int32_t algo_id = -1, tile = -1, split_k = -1, reduction_scheme = -1, stages = -1, swizzle = -1,
          custom_option = -1;
  int8_t trans_a = 0, trans_b = 0;  // cublasOperation_t: 0 N, 1 T, 2 C
  int16_t epilogue = -1;            // db::Gemm::epilogue (cublasLtEpilogue_t; -1 unrecorded)
  db::DType a_dtype = db::DType::kUnknown, b_dtype = db::DType::kUnknown;
  db::DType c_dtype = db::DType::kUnknown, d_dtype = db::DType::kUnknown;
};

// An operand's per-row digests (batch-size mode): RankOps::rows() maps [begin, end). An input
// recorded without row digests (a GEMM's weight under `record --row-digests tokens`) is held as
// one "row", its whole digest, with whole_bytes > 0: its size.
struct RowOperand {
  int32_t slot = 0;
  db::OperandRole role = db::OperandRole::kInput;
  int64_t begin = 0, end = 0;
  int64_t whole_bytes = 0;
};

// An NVTX range start or end, an instant or a step marker (db::Marker), in sequence order.
struct MarkerRecord {
  int64_t seq = -1;
  db::MarkerKind kind = db::MarkerKind::kInstant;
  int64_t domain = -1;  // strings id, -1 unset
  int64_t value = -1;   // range id (ranges), step number (step markers), -1 unset
  int32_t name = 0;     // strings id of its text
};

struct RankOps;

// The NVTX ranges open, and the last step marker, as markers are replayed in sequence order.
// Ranges are matched by (domain, range id) when an end carries an id that is open, else an end
// closes the innermost open range (push/pop).
struct MarkerState {
  struct Open {
    int64_t domain = -1, value = -1;
    int32_t name = 0;
  };
  std::vector<Open> open;
  std::optional<MarkerRecord> step;
  void apply(const MarkerRecord& m);
};

// The kernels that ran after the fingerprinted library op `from` (-1: since the start) and that it
// or a later library op did not launch: how many, and the first four distinct names. The stretch a
// divergence found in an op's inputs came through.
struct KernelsSince {
  int64_t from = -1;
  int64_t count = 0;
  std::vector<int32_t> names;  // string ids, distinct texts
  void add(const RankOps& r, const OpRecord& op);
};

// What a window keeps of its rank's events before `base`.
struct OpsPrelude {
  MarkerState markers;
  int32_t last_gemm = -1;  // OpExtra::detail of the last GEMM, -1 if none
  KernelsSince since;      // since the last library op whose outputs were fingerprinted
};

struct RankOps {
  int32_t rank = -1;
  int64_t base = 0;    // seq of ops[0]
  int64_t events = 0;  // events of the rank, in the window or not
  std::vector<OpRecord> ops;  // ops[seq - base]
  std::vector<OpExtra> extras;
  std::vector<GemmInfo> gemms;
  std::vector<db::Collective> collectives;
  std::vector<std::string> names;      // names[i] = the reader's string i (kernel names, algos, ...)
  std::vector<uint64_t> name_choices;  // by string id: the choice signature of a kernel of that name
  std::vector<RowOperand> row_operands;  // by op, in slot order (KeyOptions::rows only)
  std::vector<uint64_t> row_digests;
  std::vector<MarkerRecord> markers;   // in the window, in sequence order
  // The rank's numbers of the first extra, GEMM, collective, row operand and row digest held.
  int64_t extra_base = 0, gemm_base = 0, collective_base = 0, row_base = 0, digest_base = 0;
  OpsPrelude prelude;
  int64_t gemm_count = 0, collective_count = 0;  // in the rank
  // Counted as the rank is read: library ops (the alignment's anchors) and deep-window launches
  // (kernels with operand rows).
  int64_t anchor_count = 0, deep_launch_count = 0;
  bool fingerprinted = false;  // some operand has a digest or row digests

  const std::string& name(int64_t id) const;
  // Events of the rank. The window holds [base, end()).
  int64_t size() const { return events; }
  int64_t end() const { return base + static_cast<int64_t>(ops.size()); }
  // The op at `seq`, or nullptr if it is not in the window.
  const OpRecord* at(int64_t seq) const {
    return seq >= base && seq < end() ? &ops[static_cast<size_t>(seq - base)] : nullptr;
  }
  // Its extra record, or nullptr.
  const OpExtra* extra(const OpRecord& op) const {
    return op.extra >= 0 ? &extras[static_cast<size_t>(op.extra - extra_base)] : nullptr;
  }
  // What ran it: a library op's algorithm signature, else its name's.
  uint64_t choice(const OpRecord& op) const;
  const GemmInfo* gemm(const OpRecord& op) const;
  const db::Collective* collective(const OpRecord& op) const;
  const RowOperand& rowOperand(int64_t i) const;
  std::span<const uint64_t> rows(const RowOperand& o) const;
};

// The kernel-name family used to align kernels: the name without its parameter list and digits,
// so "gemm_128x256_kernel<bf16, 4>" and "gemm_64x128_kernel<bf16, 8>" are one family (aligned
// together, then told apart by their choice signature), while template arguments that name a
// functor keep PyTorch's elementwise kernels (silu vs add) apart.
std::string kernelFamily(const std::string& name);

// The whole rank in one RankOps.
Result<RankOps> loadRankOps(db::TraceReader& reader, int32_t rank, const KeyOptions& options = {});

// Reads a rank into a RankOps window, in sequence order, a chunk of events at a time, and forgets
// what the caller is done with: memory follows the window, not the rank.
class RankLoader {
 public:
  static Result<RankLoader> open(db::TraceReader& reader, int32_t rank, const KeyOptions& options);

  const RankOps& ops() const { return r_; }
  // Every event of the rank has been read (it may since have been dropped).
  bool done() const { return loaded_all_; }
  // Reads chunks of `chunk` events until the window reaches `seq` (exclusive) or the rank's end.
  Status loadTo(int64_t seq, int64_t chunk);
  // Forgets the events before `seq`, folding what they tell into the prelude.
  void dropBefore(int64_t seq);
  RankOps take() && { return std::move(r_); }

 private:
  Status loadChunk(int64_t from, int64_t to);
  Status loadEvents(int64_t from, int64_t to);
  Status addEvent(const db::TraceReader::EventSkeleton& e);
  uint64_t familyKey(db::EventKind kind, int32_t name);
  void fold(int64_t seq, const OpRecord& op);

  db::TraceReader* reader_ = nullptr;
  KeyOptions options_;
  RankOps r_;
  bool loaded_all_ = false;
  std::vector<uint64_t> family_;  // by string id: the hash of its kernel-name family, 0 = not yet
  // The seq of each record in the window's extras, row operands, GEMMs and collectives.
  std::vector<int64_t> extra_seqs_, row_seqs_, gemm_seqs_, collective_seqs_;
};

// The first `n` GEMMs of a rank, in sequence order (batchDimOf looks at them).
Result<std::vector<GemmInfo>> loadFirstGemms(db::TraceReader& reader, size_t n);

// Where an event sits in its program: the texts of the NVTX ranges (and the last step marker)
// open at `seq`, outermost first, e.g. {"step 3", "layer 5"}; empty if the trace has none
// (MarkerState says how ranges are matched). `seq` must not be before the window.
std::vector<std::string> positionAt(const RankOps& ops, int64_t seq);

// A landmark that needs no markers: "GEMM 6 of 40", "collective 2 of 8", or for other events
// "kernel after GEMM 6 of 40" / "kernel before the first GEMM".
std::string landmarkAt(const RankOps& ops, int64_t seq);

}  // namespace detrace::replay
