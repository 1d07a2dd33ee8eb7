// Schema version 1: every table and column of a detrace trace, with its meaning.
// One file holds one recorded process (one rank). Integer columns that do not apply are NULL.
// Timestamps are nanoseconds on CUPTI's clock (cuptiGetTimestamp), which the host and GPU
// timestamps share. Digests are unsigned 64-bit values stored bit-cast in INTEGER columns.
// A table added without changing the meaning of the others (launch_params, graph_ops) keeps the version:
// older files simply lack it, and the reader treats a missing one as empty. So does a column added
// at the end of a table (collectives.redop_scalar, gemms.epilogue): the reader selects NULL in place of a missing one.
#include "detrace/db/schema.h"

#include <array>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

namespace detrace::db {
namespace {

constexpr ColumnDef kMeta[] = {
    {"key", "TEXT", "PRIMARY KEY", "Metadata key (schema_version, tool_version, command, env.*, host, "
                                   "gpu_model, driver_version, cuda_version, nccl_version, "
                                   "cublas_version, start_time_ns, ...)"},
    {"value", "TEXT", "NOT NULL", "Metadata value, as text"},
};

constexpr ColumnDef kRanks[] = {
    {"rank", "INTEGER", "PRIMARY KEY", "Rank of this process in its NCCL world; -1 until known"},
    {"world_size", "INTEGER", "", "Number of ranks in the world communicator"},
    {"local_rank", "INTEGER", "", "Rank within the host"},
    {"device", "INTEGER", "", "CUDA device ordinal the process used"},
    {"pid", "INTEGER", "", "Process id"},
    {"host", "TEXT", "", "Host name"},
    {"gpu_name", "TEXT", "", "GPU model, e.g. NVIDIA H200"},
    {"gpu_uuid", "TEXT", "", "GPU UUID"},
};

constexpr ColumnDef kStrings[] = {
    {"id", "INTEGER", "PRIMARY KEY", "Interned string id, referenced by *_id and name columns"},
    {"text", "TEXT", "NOT NULL", "The string (kernel names are demangled)"},
};

constexpr ColumnDef kStreams[] = {
    {"id", "INTEGER", "PRIMARY KEY", "Stream id within this trace"},
    {"handle", "INTEGER", "", "CUstream value in the recorded process (0 = legacy default)"},
    {"device", "INTEGER", "", "CUDA device ordinal"},
    {"priority", "INTEGER", "", "Stream priority"},
    {"name", "INTEGER", "", "strings.id of a user-given stream name, if any"},
};

constexpr ColumnDef kEvents[] = {
    {"seq", "INTEGER", "PRIMARY KEY", "Dense per-rank sequence number, 0..n-1, in recording order"},
    {"kind", "INTEGER", "NOT NULL", "EventKind: 1 kernel, 2 memcpy, 3 memset, 4 collective, 5 gemm, "
                                    "6 marker, 7 sync, 8 other"},
    {"name", "INTEGER", "", "strings.id: demangled kernel name, API or op name, marker text"},
    {"stream", "INTEGER", "", "streams.id of the stream it ran on"},
    {"device", "INTEGER", "", "CUDA device ordinal"},
    {"cpu_ns", "INTEGER", "", "Host time of the API call"},
    {"gpu_start_ns", "INTEGER", "", "GPU start time (CUPTI activity)"},
    {"gpu_end_ns", "INTEGER", "", "GPU end time (CUPTI activity)"},
    {"correlation_id", "INTEGER", "", "CUPTI correlation id linking API call and GPU activity"},
    {"graph_id", "INTEGER", "", "CUDA graph id when replayed from a graph"},
    {"graph_node_id", "INTEGER", "", "CUDA graph node id when replayed from a graph"},
    {"parent_seq", "INTEGER", "", "seq of the library op (GEMM, collective) that launched it"},
    {"grid", "INTEGER", "", "Kernels: grid dimensions packed as x | y << 32 | z << 48 (x < 2^31, "
                            "y, z < 2^16); the view kernel_launches unpacks them"},
    {"block", "INTEGER", "", "Kernels: block dimensions packed as x | y << 16 | z << 32"},
    {"smem_static", "INTEGER", "", "Kernels: static shared memory per block, bytes"},
    {"smem_dynamic", "INTEGER", "", "Kernels: dynamic shared memory per block, bytes"},
    {"registers", "INTEGER", "", "Kernels: registers per thread"},
    {"launch_api", "INTEGER", "", "Kernels: LaunchApi: 0 unknown, 1 runtime, 2 driver, 3 driver Ex, "
                                  "4 cooperative, 5 CUDA graph"},
};

constexpr ColumnDef kCollectives[] = {
    {"seq", "INTEGER", "PRIMARY KEY", "events.seq of the collective"},
    {"op", "INTEGER", "NOT NULL", "CollOp: 1 AllReduce, 2 ReduceScatter, 3 AllGather, 4 Broadcast, "
                                  "5 Reduce, 6 Send, 7 Recv, 8 AllToAll, 9 Gather, 10 Scatter"},
    {"dtype", "INTEGER", "", "DType of the elements"},
    {"count", "INTEGER", "", "Element count as passed to NCCL"},
    {"redop", "INTEGER", "", "RedOp: 0 sum, 1 prod, 2 max, 3 min, 4 avg, 5 premulsum (made by "
                             "`ncclRedOpCreatePreMulSum`: its scalar in redop_scalar), 6 a custom operator the "
                             "tracer did not see made (before it loaded: the stat nccl_redops_unknown counts "
                             "such calls); NULL for non-reductions. Traces written before 5 and 6 existed "
                             "hold NCCL's own number for any custom operator (any value past 4: NCCL "
                             "mixes it with the communicator's address)"},
    {"root", "INTEGER", "", "Root rank (Broadcast, Reduce)"},
    {"peer", "INTEGER", "", "Peer rank (Send, Recv)"},
    {"comm_id", "INTEGER", "",
     "Communicator id, equal on every rank: a hash of its unique id (of all its roots' for "
     "`ncclCommInitRankScalable`), or, for `ncclCommSplit` and `ncclCommShrink`, of its parent's id and how "
     "it was derived; NULL where the tracer does not know the communicator (one split or shrunk from a "
     "non-blocking communicator whose handle left the slot NCCL wrote it to before its first call: the "
     "stat nccl_comms_unfollowed counts them)"},
    {"comm_rank", "INTEGER", "", "This process's rank in the communicator"},
    {"comm_nranks", "INTEGER", "", "Ranks in the communicator"},
    {"comm_seq", "INTEGER", "", "Per-communicator sequence number of the call, equal on every rank: collectives are numbered in call order; a send or receive among the messages between the same two ranks in the same direction (the n-th send from rank S to rank R and R's n-th receive from S carry n), so that ranks making different numbers of them (pipeline stages) still number the collectives alike"},
    {"algo", "INTEGER", "", "strings.id of the NCCL algorithm (Ring, Tree, ...), from the profiler "
                            "plugin; NULL where NCCL reported none (also every call where NCCL "
                            "never loaded the plugin: the stat nccl_profiler_inits is then 0)"},
    {"proto", "INTEGER", "", "strings.id of the NCCL protocol (LL, LL128, Simple)"},
    {"channels", "INTEGER", "", "Number of channels NCCL used"},
    {"send_addr", "INTEGER", "", "Send buffer address"},
    {"recv_addr", "INTEGER", "", "Receive buffer address"},
    {"group_id", "INTEGER", "", "ncclGroupStart/End group the call belonged to"},
    {"redop_scalar", "INTEGER", "",
     "premulsum's scalar where NCCL took it from the host when the operator was made "
     "(`ncclScalarHostImmediate`): its bytes, in the collective's dtype, little-endian and zero-extended "
     "to 64 bits, stored bit-cast; NULL for other operators and for a scalar in device memory "
     "(`ncclScalarDevice`, read by NCCL at each call). Traces written before this column existed lack "
     "it and read as NULL",
     /*added_later=*/true},
};

constexpr ColumnDef kGemms[] = {
    {"seq", "INTEGER", "PRIMARY KEY", "events.seq of the GEMM call"},
    {"api", "INTEGER", "", "strings.id of the entry point (cublasLtMatmul, cublasGemmEx, ...)"},
    {"trans_a", "INTEGER", "", "1 if A is transposed"},
    {"trans_b", "INTEGER", "", "1 if B is transposed"},
    {"m", "INTEGER", "", "Rows of op(A) and D"},
    {"n", "INTEGER", "", "Columns of op(B) and D"},
    {"k", "INTEGER", "", "Inner dimension"},
    {"lda", "INTEGER", "", "Leading dimension of A"},
    {"ldb", "INTEGER", "", "Leading dimension of B"},
    {"ldc", "INTEGER", "", "Leading dimension of C"},
    {"ldd", "INTEGER", "", "Leading dimension of D"},
    {"batch_count", "INTEGER", "", "Batch count (1 if not batched)"},
    {"stride_a", "INTEGER", "", "Batch stride of A, elements"},
    {"stride_b", "INTEGER", "", "Batch stride of B, elements"},
    {"stride_c", "INTEGER", "", "Batch stride of C, elements"},
    {"stride_d", "INTEGER", "", "Batch stride of D, elements"},
    {"a_dtype", "INTEGER", "", "DType of A"},
    {"b_dtype", "INTEGER", "", "DType of B"},
    {"c_dtype", "INTEGER", "", "DType of C"},
    {"d_dtype", "INTEGER", "", "DType of D"},
    {"compute_type", "INTEGER", "", "strings.id of the compute type (CUBLAS_COMPUTE_32F, ...)"},
    {"algo_id", "INTEGER", "", "cuBLASLt algorithm id actually run"},
    {"tile", "INTEGER", "", "cublasLtMatmulTile_t of the algorithm"},
    {"split_k", "INTEGER", "", "Split-K count (1 = none)"},
    {"reduction_scheme", "INTEGER", "", "cublasLtReductionScheme_t for split-K"},
    {"stages", "INTEGER", "", "cublasLtMatmulStages_t of the algorithm"},
    {"swizzle", "INTEGER", "", "CTA swizzling of the algorithm"},
    {"custom_option", "INTEGER", "", "Custom option of the algorithm"},
    {"algo_source", "INTEGER", "", "0 unknown, 1 given by the caller, 2 picked by cuBLASLt's heuristic"},
    {"a_addr", "INTEGER", "", "Address of A"},
    {"b_addr", "INTEGER", "", "Address of B"},
    {"c_addr", "INTEGER", "", "Address of C"},
    {"d_addr", "INTEGER", "", "Address of D"},
    {"epilogue", "INTEGER", "",
     "cublasLtEpilogue_t of a cuBLASLt matmul's descriptor (1 default: none, 2 relu, 4 bias, 6 relu_bias, "
     "32 gelu, 36 gelu_bias, 130 relu_aux, 134 relu_aux_bias, 160 gelu_aux, 164 gelu_aux_bias, 136 drelu, "
     "152 drelu_bgrad, 192 dgelu, 208 dgelu_bgrad, 256 bgrada, 512 bgradb; cublasLt.h); 1 for the classic "
     "cuBLAS entry points, which have none. Traces written before this column existed lack it and read "
     "as NULL",
     /*added_later=*/true},
};

constexpr ColumnDef kMarkers[] = {
    {"seq", "INTEGER", "PRIMARY KEY", "events.seq of the marker (its text is events.name)"},
    {"marker_kind", "INTEGER", "NOT NULL", "MarkerKind: 1 range start, 2 range end, 3 instant, 4 step"},
    {"domain", "INTEGER", "", "strings.id of the NVTX domain"},
    {"value", "INTEGER", "", "Step number for step markers, range id for ranges"},
};

constexpr ColumnDef kOperands[] = {
    {"id", "INTEGER", "PRIMARY KEY", "Operand id"},
    {"seq", "INTEGER", "NOT NULL", "events.seq of the op that read or wrote it"},
    {"slot", "INTEGER", "NOT NULL", "Position among the op's operands: a GEMM's A, B, C, D are 0-3, "
                                    "the cuBLASLt descriptor's bias, aux, A_scale, B_scale, C_scale, "
                                    "D_scale, D_amax, aux_scale, aux_amax 4-12; a collective's send 0, "
                                    "recv 1"},
    {"name", "INTEGER", "", "strings.id: A, B, C, D, bias, aux, A_scale, ..., send, recv, ..."},
    {"role", "INTEGER", "NOT NULL", "OperandRole: 1 input, 2 output, 3 input and output"},
    {"dtype", "INTEGER", "", "DType of the elements"},
    {"shape", "TEXT", "", "Shape as a JSON array of integers, outermost first"},
    {"address", "INTEGER", "", "Device address of the first byte"},
    {"bytes", "INTEGER", "", "Bytes covered (rows * row_bytes when rows are known)"},
    {"rows", "INTEGER", "", "Rows (one row = one token's vector)"},
    {"row_bytes", "INTEGER", "", "Bytes per row"},
    {"row_stride", "INTEGER", "", "Bytes between row starts"},
    {"digest", "INTEGER", "", "Whole-operand digest (docs/digest.md), NULL if not taken"},
    {"row_digests", "BLOB", "", "Per-row digests, little-endian uint64 each"},
    {"capture_bytes", "INTEGER", "", "Uncompressed size of capture, 0 if nothing was captured"},
    {"capture", "BLOB", "", "Captured bytes, zstd-compressed, NULL if not captured. Last column, so "
                            "reading the others never walks its overflow pages"},
};

constexpr ColumnDef kLaunchParams[] = {
    {"seq", "INTEGER", "PRIMARY KEY", "events.seq of the kernel launch (deep window)"},
    {"layout", "TEXT", "", "[[offset,size],...] per parameter, from cuFuncGetParamInfo"},
    {"bytes", "BLOB", "", "The launch's parameter bytes laid out by layout"},
};

constexpr ColumnDef kGraphOps[] = {
    {"seq", "INTEGER", "PRIMARY KEY", "events.seq of a GEMM or collective as one launch of a CUDA "
                                      "graph replayed it (its fingerprints are this replay's)"},
    {"template_seq", "INTEGER", "", "events.seq of the call captured into the graph (recorded at "
                                    "capture, without fingerprints); NULL if not known"},
    {"replay", "INTEGER", "", "Launch number of the executable graph, from 0, over the launches "
                              "the tracer recorded"},
    {"graph_exec", "INTEGER", "", "CUgraphExec value in the recorded process (tells executable "
                                  "graphs apart)"},
};

constexpr ColumnDef kStats[] = {
    {"key", "TEXT", "PRIMARY KEY", "Counter name (events_written, events_dropped, operands_dropped, "
                                   "bytes_captured, strings_written, recorder_overhead_ns, ...)"},
    {"value", "INTEGER", "NOT NULL", "Counter value at the last commit"},
};

constexpr const char* kOperandIndexes[] = {"CREATE INDEX operands_by_seq ON operands(seq)"};

constexpr TableDef kTables[] = {
    {"meta", "Run and process metadata, key/value", kMeta, {}},
    {"ranks", "The recorded process's rank (one row per file)", kRanks, {}},
    {"strings", "Interned strings", kStrings, {}},
    {"streams", "CUDA streams seen", kStreams, {}},
    {"events", "Every recorded event of this rank, in sequence order", kEvents, {}},
    {"collectives", "Details of collective and point-to-point events", kCollectives, {}},
    {"gemms", "Details of GEMM events, with the algorithm actually run", kGemms, {}},
    {"markers", "Details of marker events", kMarkers, {}},
    {"operands", "Tensors read or written by ops: fingerprints and captured bytes", kOperands,
     kOperandIndexes},
    {"launch_params", "Parameters of kernel launches in a deep window (docs/architecture.md). The "
     "memory their words point into is digested before (operand role 1) and after (role 2) the "
     "launch, one operand slot per allocation, named by the words (arg0,arg3+8). Traces written "
     "before this table existed lack it and read as having none",
     kLaunchParams, {}},
    {"graph_ops", "Library ops replayed by CUDA graph launches (docs/architecture.md, \"Graph "
     "replays\"): one row per op and launch. Traces written before this table existed lack it and "
     "read as having none",
     kGraphOps, {}},
    {"stats", "Recorder counters: drops, bytes, overhead", kStats, {}},
};

// Views for people querying traces with sqlite3: unpacked launch dimensions.
constexpr const char* kViews[] = {
    "CREATE VIEW kernel_launches AS SELECT e.seq, s.text AS name, e.stream, e.device, e.cpu_ns, "
    "e.gpu_start_ns, e.gpu_end_ns, e.graph_id, e.graph_node_id, "
    "e.grid & 0xffffffff AS grid_x, (e.grid >> 32) & 0xffff AS grid_y, (e.grid >> 48) & 0xffff AS grid_z, "
    "e.block & 0xffff AS block_x, (e.block >> 16) & 0xffff AS block_y, (e.block >> 32) & 0xffff AS block_z, "
    "e.smem_static, e.smem_dynamic, e.registers, e.launch_api "
    "FROM events e LEFT JOIN strings s ON s.id = e.name WHERE e.kind = 1",
};

}  // namespace

std::span<const TableDef> schemaTables() { return kTables; }

const TableDef& schemaTable(std::string_view name) {
  for (const TableDef& t : kTables) {
    if (name == t.name) return t;
  }
  std::abort();  // programming error: tables are fixed at compile time
}

std::string schemaDdl() {
  std::string ddl;
  for (const TableDef& t : kTables) {
    ddl += fmt::format("CREATE TABLE {} (", t.name);
    for (size_t i = 0; i < t.columns.size(); ++i) {
      const ColumnDef& c = t.columns[i];
      ddl += fmt::format("{}{} {}{}{}", i ? ", " : "", c.name, c.type, *c.constraint ? " " : "",
                         c.constraint);
    }
    ddl += ");\n";
    for (const char* index : t.indexes) ddl += fmt::format("{};\n", index);
  }
  for (const char* view : kViews) ddl += fmt::format("{};\n", view);
  return ddl;
}

std::string insertSql(const TableDef& table, int rows) {
  std::string cols, params = "(";
  for (size_t i = 0; i < table.columns.size(); ++i) {
    cols += fmt::format("{}{}", i ? ", " : "", table.columns[i].name);
    params += i ? ", ?" : "?";
  }
  params += ")";
  std::string values = params;
  for (int r = 1; r < rows; ++r) values += ", " + params;
  return fmt::format("INSERT INTO {} ({}) VALUES {}", table.name, cols, values);
}

std::string schemaMarkdown() {
  std::string md = fmt::format(
      "# detrace trace schema, version {}\n\n"
      "Generated from `db/src/schema.cc` by `detrace schema`; do not edit by hand.\n\n"
      "A run is a directory with `manifest.json` and one SQLite file per recorded process "
      "(`*{}`). Each file has `PRAGMA application_id = 0x{:08X}` and `PRAGMA user_version = {}`. "
      "Timestamps are nanoseconds on CUPTI's clock. Integer columns that do not apply are NULL. "
      "Digests are unsigned 64-bit values stored bit-cast in INTEGER columns (docs/digest.md).\n",
      kSchemaVersion, kTraceExtension, static_cast<uint32_t>(kApplicationId), kSchemaVersion);
  for (const TableDef& t : kTables) {
    md += fmt::format("\n## `{}`\n\n{}.\n\n| column | type | | meaning |\n| --- | --- | --- | --- |\n",
                      t.name, t.doc);
    for (const ColumnDef& c : t.columns) {
      md += fmt::format("| `{}` | {} | {} | {} |\n", c.name, c.type, c.constraint, c.doc);
    }
    for (const char* index : t.indexes) md += fmt::format("\nIndex: `{}`\n", index);
  }
  md += "\n## Views\n\n";
  for (const char* view : kViews) md += fmt::format("```sql\n{}\n```\n", view);
  return md;
}

}  // namespace detrace::db
