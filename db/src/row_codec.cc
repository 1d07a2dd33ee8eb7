#include "row_codec.h"

#include <bit>
#include <cstring>

#include <nlohmann/json.hpp>

#include "detrace/db/schema.h"
#include "sqlite_util.h"

namespace detrace::db {

std::string columnList(std::string_view table, std::string_view prefix) {
  std::string out;
  for (const ColumnDef& c : schemaTable(table).columns) {
    if (!out.empty()) out += ", ";
    out += prefix;
    out += c.name;
  }
  return out;
}

int64_t packGrid(const std::array<int32_t, 3>& g) {
  auto u = [](int32_t v, uint64_t mask) { return static_cast<uint64_t>(static_cast<uint32_t>(v)) & mask; };
  return static_cast<int64_t>(u(g[0], 0x7fffffff) | u(g[1], 0xffff) << 32 | u(g[2], 0xffff) << 48);
}

std::array<int32_t, 3> unpackGrid(int64_t packed) {
  auto v = static_cast<uint64_t>(packed);
  return {static_cast<int32_t>(v & 0x7fffffff), static_cast<int32_t>((v >> 32) & 0xffff),
          static_cast<int32_t>((v >> 48) & 0xffff)};
}

int64_t packBlock(const std::array<int32_t, 3>& b) {
  auto u = [](int32_t v) { return static_cast<uint64_t>(static_cast<uint32_t>(v)) & 0xffff; };
  return static_cast<int64_t>(u(b[0]) | u(b[1]) << 16 | u(b[2]) << 32);
}

std::array<int32_t, 3> unpackBlock(int64_t packed) {
  auto v = static_cast<uint64_t>(packed);
  return {static_cast<int32_t>(v & 0xffff), static_cast<int32_t>((v >> 16) & 0xffff),
          static_cast<int32_t>((v >> 32) & 0xffff)};
}

void bindEvent(sqlite3_stmt* s, const Event& e, int base) {
  int b = base;
  bindInt(s, b + 1, e.seq);
  bindInt(s, b + 2, static_cast<int64_t>(e.kind));
  bindOpt(s, b + 3, e.name);
  bindOpt(s, b + 4, e.stream);
  bindOpt(s, b + 5, e.device);
  bindOpt(s, b + 6, e.cpu_ns);
  bindOpt(s, b + 7, e.gpu_start_ns);
  bindOpt(s, b + 8, e.gpu_end_ns);
  bindOpt(s, b + 9, e.correlation_id);
  bindOpt(s, b + 10, e.graph_id);
  bindOpt(s, b + 11, e.graph_node_id);
  bindOpt(s, b + 12, e.parent_seq);
  if (e.has_launch) {
    const LaunchInfo& l = e.launch;
    bindInt(s, b + 13, packGrid(l.grid));
    bindInt(s, b + 14, packBlock(l.block));
    bindOpt(s, b + 15, l.smem_static);
    bindOpt(s, b + 16, l.smem_dynamic);
    bindOpt(s, b + 17, l.registers);
    bindInt(s, b + 18, static_cast<int64_t>(l.api));
  } else {
    for (int i = 13; i <= 18; ++i) sqlite3_bind_null(s, b + i);
  }
}

Event readEvent(sqlite3_stmt* s, int f) {
  Event e;
  e.seq = sqlite3_column_int64(s, f + 0);
  e.kind = static_cast<EventKind>(sqlite3_column_int(s, f + 1));
  e.name = colOpt(s, f + 2);
  e.stream = colOpt(s, f + 3);
  e.device = colOpt32(s, f + 4);
  e.cpu_ns = colOpt(s, f + 5);
  e.gpu_start_ns = colOpt(s, f + 6);
  e.gpu_end_ns = colOpt(s, f + 7);
  e.correlation_id = colOpt(s, f + 8);
  e.graph_id = colOpt(s, f + 9);
  e.graph_node_id = colOpt(s, f + 10);
  e.parent_seq = colOpt(s, f + 11);
  e.has_launch = sqlite3_column_type(s, f + 17) != SQLITE_NULL;
  if (e.has_launch) {
    LaunchInfo& l = e.launch;
    l.grid = unpackGrid(sqlite3_column_int64(s, f + 12));
    l.block = unpackBlock(sqlite3_column_int64(s, f + 13));
    l.smem_static = colOpt32(s, f + 14);
    l.smem_dynamic = colOpt32(s, f + 15);
    l.registers = colOpt32(s, f + 16);
    l.api = static_cast<LaunchApi>(sqlite3_column_int(s, f + 17));
  }
  return e;
}

void bindCollective(sqlite3_stmt* s, int64_t seq, const Collective& c) {
  bindInt(s, 1, seq);
  bindInt(s, 2, static_cast<int64_t>(c.op));
  bindInt(s, 3, static_cast<int64_t>(c.dtype));
  bindInt(s, 4, c.count);
  bindOpt(s, 5, static_cast<int64_t>(c.redop));
  bindOpt(s, 6, c.root);
  bindOpt(s, 7, c.peer);
  bindOpt(s, 8, c.comm_id);
  bindOpt(s, 9, c.comm_rank);
  bindOpt(s, 10, c.comm_nranks);
  bindOpt(s, 11, c.comm_seq);
  bindOpt(s, 12, c.algo);
  bindOpt(s, 13, c.proto);
  bindOpt(s, 14, c.channels);
  bindInt(s, 15, c.send_addr);
  bindInt(s, 16, c.recv_addr);
  bindOpt(s, 17, c.group_id);
  if (c.has_redop_scalar) {
    bindInt(s, 18, std::bit_cast<int64_t>(c.redop_scalar));
  } else {
    sqlite3_bind_null(s, 18);
  }
}

Collective readCollective(sqlite3_stmt* s, int f) {
  Collective c;
  c.op = static_cast<CollOp>(sqlite3_column_int(s, f + 0));
  c.dtype = static_cast<DType>(sqlite3_column_int(s, f + 1));
  c.count = sqlite3_column_int64(s, f + 2);
  c.redop = static_cast<RedOp>(colOpt32(s, f + 3));
  c.root = colOpt32(s, f + 4);
  c.peer = colOpt32(s, f + 5);
  c.comm_id = colOpt(s, f + 6);
  c.comm_rank = colOpt32(s, f + 7);
  c.comm_nranks = colOpt32(s, f + 8);
  c.comm_seq = colOpt(s, f + 9);
  c.algo = colOpt(s, f + 10);
  c.proto = colOpt(s, f + 11);
  c.channels = colOpt32(s, f + 12);
  c.send_addr = sqlite3_column_int64(s, f + 13);
  c.recv_addr = sqlite3_column_int64(s, f + 14);
  c.group_id = colOpt(s, f + 15);
  c.has_redop_scalar = sqlite3_column_type(s, f + 16) != SQLITE_NULL;
  c.redop_scalar = std::bit_cast<uint64_t>(sqlite3_column_int64(s, f + 16));
  return c;
}

void bindGemm(sqlite3_stmt* s, int64_t seq, const Gemm& g) {
  const int64_t values[] = {
      seq, g.api, g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.ldd, g.batch_count,
      g.stride_a, g.stride_b, g.stride_c, g.stride_d, static_cast<int64_t>(g.a_dtype),
      static_cast<int64_t>(g.b_dtype), static_cast<int64_t>(g.c_dtype),
      static_cast<int64_t>(g.d_dtype), g.compute_type, g.algo_id, g.tile, g.split_k,
      g.reduction_scheme, g.stages, g.swizzle, g.custom_option, g.algo_source, g.a_addr, g.b_addr,
      g.c_addr, g.d_addr, g.epilogue};
  int i = 1;
  for (int64_t v : values) bindOpt(s, i++, v);
}

Gemm readGemm(sqlite3_stmt* s, int f) {
  Gemm g;
  int i = f;
  auto next = [&] { return colOpt(s, i++); };
  auto next32 = [&] { return static_cast<int32_t>(next()); };
  auto nextType = [&] { int64_t v = next(); return v < 0 ? DType::kUnknown : static_cast<DType>(v); };
  g.api = next();
  g.trans_a = next32();
  g.trans_b = next32();
  g.m = next(); g.n = next(); g.k = next();
  g.lda = next(); g.ldb = next(); g.ldc = next(); g.ldd = next();
  g.batch_count = next32();
  g.stride_a = next(); g.stride_b = next(); g.stride_c = next(); g.stride_d = next();
  g.a_dtype = nextType(); g.b_dtype = nextType(); g.c_dtype = nextType(); g.d_dtype = nextType();
  g.compute_type = next();
  g.algo_id = next32(); g.tile = next32(); g.split_k = next32(); g.reduction_scheme = next32();
  g.stages = next32(); g.swizzle = next32(); g.custom_option = next32();
  g.algo_source = next32();
  g.a_addr = next(); g.b_addr = next(); g.c_addr = next(); g.d_addr = next();
  g.epilogue = next32();
  return g;
}

void bindMarker(sqlite3_stmt* s, int64_t seq, const Marker& m) {
  bindInt(s, 1, seq);
  bindInt(s, 2, static_cast<int64_t>(m.marker_kind));
  bindOpt(s, 3, m.domain);
  bindOpt(s, 4, m.value);
}

Marker readMarker(sqlite3_stmt* s, int f) {
  Marker m;
  m.marker_kind = static_cast<MarkerKind>(sqlite3_column_int(s, f));
  m.domain = colOpt(s, f + 1);
  m.value = colOpt(s, f + 2);
  return m;
}

void bindStream(sqlite3_stmt* s, const StreamInfo& st) {
  bindInt(s, 1, st.id);
  bindInt(s, 2, st.handle);
  bindOpt(s, 3, st.device);
  bindInt(s, 4, st.priority);
  bindOpt(s, 5, st.name);
}

StreamInfo readStream(sqlite3_stmt* s) {
  StreamInfo st;
  st.id = sqlite3_column_int64(s, 0);
  st.handle = sqlite3_column_int64(s, 1);
  st.device = colOpt32(s, 2);
  st.priority = static_cast<int32_t>(sqlite3_column_int64(s, 3));
  st.name = colOpt(s, 4);
  return st;
}

void bindRank(sqlite3_stmt* s, const RankInfo& r) {
  bindInt(s, 1, r.rank);
  bindOpt(s, 2, r.world_size);
  bindOpt(s, 3, r.local_rank);
  bindOpt(s, 4, r.device);
  bindInt(s, 5, r.pid);
  bindText(s, 6, r.host);
  bindText(s, 7, r.gpu_name);
  bindText(s, 8, r.gpu_uuid);
}

RankInfo readRank(sqlite3_stmt* s) {
  RankInfo r;
  r.rank = colOpt32(s, 0);
  r.world_size = colOpt32(s, 1);
  r.local_rank = colOpt32(s, 2);
  r.device = colOpt32(s, 3);
  r.pid = sqlite3_column_int64(s, 4);
  r.host = colText(s, 5);
  r.gpu_name = colText(s, 6);
  r.gpu_uuid = colText(s, 7);
  return r;
}

void bindLaunchParams(sqlite3_stmt* s, const LaunchParams& p) {
  bindInt(s, 1, p.seq);
  bindText(s, 2, p.layout);
  bindBlob(s, 3, p.bytes.data(), p.bytes.size());
}

LaunchParams readLaunchParams(sqlite3_stmt* s) {
  LaunchParams p;
  p.seq = sqlite3_column_int64(s, 0);
  p.layout = colText(s, 1);
  const auto* blob = static_cast<const uint8_t*>(sqlite3_column_blob(s, 2));
  p.bytes.assign(blob, blob + sqlite3_column_bytes(s, 2));
  return p;
}

void bindGraphOp(sqlite3_stmt* s, const GraphOp& g) {
  bindInt(s, 1, g.seq);
  bindOpt(s, 2, g.template_seq);
  bindOpt(s, 3, g.replay);
  bindInt(s, 4, g.graph_exec);
}

GraphOp readGraphOp(sqlite3_stmt* s) {
  GraphOp g;
  g.seq = sqlite3_column_int64(s, 0);
  g.template_seq = colOpt(s, 1);
  g.replay = colOpt(s, 2);
  g.graph_exec = sqlite3_column_int64(s, 3);
  return g;
}

void bindOperandFields(sqlite3_stmt* s, const Operand& o) {
  bindInt(s, 1, o.id);
  bindInt(s, 2, o.seq);
  bindInt(s, 3, o.slot);
  bindOpt(s, 4, o.name);
  bindInt(s, 5, static_cast<int64_t>(o.role));
  bindInt(s, 6, static_cast<int64_t>(o.dtype));
  bindText(s, 7, encodeShape(o.shape));
  bindInt(s, 8, o.address);
  bindInt(s, 9, o.bytes);
  bindInt(s, 10, o.rows);
  bindInt(s, 11, o.row_bytes);
  bindInt(s, 12, o.row_stride);
  if (o.has_digest) {
    bindInt(s, 13, std::bit_cast<int64_t>(o.digest));
  } else {
    sqlite3_bind_null(s, 13);
  }
  std::string digests = encodeDigests(o.row_digests);
  bindBlob(s, 14, digests.data(), digests.size());
  bindInt(s, 15, o.capture_bytes);
  // 16 (capture) is bound by the caller.
}

Result<Operand> readOperandFields(sqlite3_stmt* s) {
  Operand o;
  o.id = sqlite3_column_int64(s, 0);
  o.seq = sqlite3_column_int64(s, 1);
  o.slot = sqlite3_column_int(s, 2);
  o.name = colOpt(s, 3);
  o.role = static_cast<OperandRole>(sqlite3_column_int(s, 4));
  o.dtype = static_cast<DType>(sqlite3_column_int(s, 5));
  DETRACE_ASSIGN_OR_RETURN(o.shape, decodeShape(colText(s, 6)));
  o.address = sqlite3_column_int64(s, 7);
  o.bytes = sqlite3_column_int64(s, 8);
  o.rows = sqlite3_column_int64(s, 9);
  o.row_bytes = sqlite3_column_int64(s, 10);
  o.row_stride = sqlite3_column_int64(s, 11);
  o.has_digest = sqlite3_column_type(s, 12) != SQLITE_NULL;
  o.digest = std::bit_cast<uint64_t>(sqlite3_column_int64(s, 12));
  const void* blob = sqlite3_column_blob(s, 13);
  DETRACE_ASSIGN_OR_RETURN(o.row_digests,
                           decodeRowDigests(blob, static_cast<size_t>(sqlite3_column_bytes(s, 13)),
                                            o.rows, o.has_digest, o.seq, o.slot));
  o.capture_bytes = sqlite3_column_int64(s, 14);
  return o;
}

std::string operandFieldList() {
  std::string list = columnList("operands");
  return list.substr(0, list.rfind(", capture"));
}

std::string encodeDigests(const std::vector<uint64_t>& digests) {
  std::string out(digests.size() * 8, '\0');
  for (size_t i = 0; i < digests.size(); ++i) {
    for (int b = 0; b < 8; ++b) out[i * 8 + static_cast<size_t>(b)] = static_cast<char>(digests[i] >> (8 * b));
  }
  return out;
}

std::vector<uint64_t> decodeDigests(const void* data, size_t bytes) {
  std::vector<uint64_t> out(bytes / 8);
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = (v << 8) | p[i * 8 + static_cast<size_t>(b)];
    out[i] = v;
  }
  return out;
}

Result<std::vector<uint64_t>> decodeRowDigests(const void* data, size_t bytes, int64_t rows,
                                               bool has_digest, int64_t seq, int32_t slot) {
  const bool none_due = rows <= 0 || !has_digest;  // no rows, or no digest taken at all
  // (Rows 0 with digests: files written by hand, e.g. tests', that leave the count out.)
  const bool whole = bytes % 8 == 0 && (rows <= 0 || bytes / 8 == static_cast<uint64_t>(rows));
  if (bytes == 0 ? none_due : whole) return decodeDigests(data, bytes);
  return makeError(ErrorCode::kCorrupt,
                   "the row digests of operand slot {} of event {} are damaged ({} bytes for {} "
                   "row(s)); the file is damaged: record the run again",
                   slot, seq, bytes, rows);
}

std::string encodeShape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += fmt::format("{}{}", i ? "," : "", shape[i]);
  return out + "]";
}

Result<std::vector<int64_t>> decodeShape(std::string_view text) {
  if (text.empty()) return std::vector<int64_t>{};
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) {
    return makeError(ErrorCode::kCorrupt, "operand shape '{:.40}' is not a JSON array", text);
  }
  std::vector<int64_t> shape;
  for (const auto& d : j) {
    if (!d.is_number_integer()) {
      return makeError(ErrorCode::kCorrupt, "operand shape '{:.40}' holds a non-integer", text);
    }
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

}  // namespace detrace::db
