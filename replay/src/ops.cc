#include "detrace/replay/ops.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <mutex>
#include <optional>

#include <xxhash.h>

namespace detrace::replay {
namespace {

// Order-sensitive combination of 64-bit values.
class Hasher {
 public:
  Hasher& add(uint64_t v) {
    state_ = XXH3_64bits_withSeed(&v, sizeof v, state_);
    return *this;
  }
  Hasher& add(const std::string& s) { return add(XXH3_64bits(s.data(), s.size())); }
  uint64_t value() const { return state_; }

 private:
  uint64_t state_ = 0x6465747261636521ULL;
};

uint64_t gemmKey(const GemmInfo& g, const RankOps& r, const KeyOptions& o) {
  Hasher h;
  h.add(static_cast<uint64_t>(db::EventKind::kGemm)).add(r.name(g.api));
  h.add(static_cast<uint64_t>(g.trans_a)).add(static_cast<uint64_t>(g.trans_b));
  h.add(static_cast<uint64_t>(o.batch_dim == BatchDim::kM ? -1 : g.m));
  h.add(static_cast<uint64_t>(o.batch_dim == BatchDim::kN ? -1 : g.n));
  h.add(static_cast<uint64_t>(g.k)).add(static_cast<uint64_t>(g.batch_count));
  for (db::DType t : {g.a_dtype, g.b_dtype, g.c_dtype, g.d_dtype}) h.add(static_cast<uint64_t>(t));
  return h.value();
}

uint64_t gemmChoice(const GemmInfo& g) {
  Hasher h;
  for (int32_t v : {g.algo_id, g.tile, g.split_k, g.reduction_scheme, g.stages, g.swizzle,
                    g.custom_option}) {
    h.add(static_cast<uint64_t>(v));
  }
  return h.value();
}

uint64_t collectiveKey(const db::Collective& c, const KeyOptions& o) {
  Hasher h;
  h.add(static_cast<uint64_t>(db::EventKind::kCollective)).add(static_cast<uint64_t>(c.op));
  h.add(static_cast<uint64_t>(c.dtype)).add(static_cast<uint64_t>(c.redop));
  h.add(static_cast<uint64_t>(c.comm_nranks)).add(static_cast<uint64_t>(c.root));
  h.add(static_cast<uint64_t>(c.peer));
  h.add(static_cast<uint64_t>(o.batch_dim != BatchDim::kNone ? -1 : c.count));
  return h.value();
}

uint64_t collectiveChoice(const db::Collective& c, const RankOps& r) {
  return Hasher().add(r.name(c.algo)).add(r.name(c.proto)).add(static_cast<uint64_t>(c.channels)).value();
}

int32_t narrowId(int64_t id) {
  return id > 0 && id <= std::numeric_limits<int32_t>::max() ? static_cast<int32_t>(id) : 0;
}

GemmInfo compactGemm(const db::Gemm& g) {
  GemmInfo c;
  c.m = g.m;
  c.n = g.n;
  c.k = g.k;
  c.api = narrowId(g.api);
  c.batch_count = g.batch_count;
  c.algo_id = g.algo_id;
  c.tile = g.tile;
  c.split_k = g.split_k;
  c.reduction_scheme = g.reduction_scheme;
  c.stages = g.stages;
  c.swizzle = g.swizzle;
  c.custom_option = g.custom_option;
  c.trans_a = static_cast<int8_t>(g.trans_a);
  c.trans_b = static_cast<int8_t>(g.trans_b);
  c.a_dtype = g.a_dtype;
  c.b_dtype = g.b_dtype;
  c.c_dtype = g.c_dtype;
  c.d_dtype = g.d_dtype;
  return c;
}

// Digests of one op's operands, each side combined in slot order; absent if any is missing.
struct PendingFingerprints {
  int64_t seq = -1;
  uint64_t inputs = 0, outputs = 0;
  bool has_inputs = false, has_outputs = false;
  int32_t rows_begin = 0, rows_end = 0;
};

// Reduces the operands (in seq, slot order) to one record per op, and keeps their row digests
// flat when asked. The full operand list is the largest thing a load reads: it is dropped here.
// Folds a rank's operands, streamed in (seq, slot) order, into one PendingFingerprints per op:
// combined input and output digests, and (for batch mode) the row digests in one flat array.
class OperandReducer {
 public:
  OperandReducer(bool rows, RankOps& r) : rows_(rows), r_(r) {}

  void add(db::Operand& o) {
    if (open_ && o.seq != f_.seq) close();
    if (!open_) begin(o.seq);
    r_.fingerprinted |= o.has_digest || !o.row_digests.empty();
    bool is_in = o.role == db::OperandRole::kInput || o.role == db::OperandRole::kInOut;
    bool is_out = o.role == db::OperandRole::kOutput || o.role == db::OperandRole::kInOut;
    if (is_in) {
      any_in_ = true;
      in_ok_ &= o.has_digest;
      in_.add(static_cast<uint64_t>(o.slot)).add(o.digest);
    }
    if (is_out) {
      any_out_ = true;
      out_ok_ &= o.has_digest;
      outs_.add(static_cast<uint64_t>(o.slot)).add(o.digest);
    }
    if (rows_ && !o.row_digests.empty()) {
      auto first = static_cast<int64_t>(r_.row_digests.size());
      r_.row_digests.insert(r_.row_digests.end(), o.row_digests.begin(), o.row_digests.end());
      r_.row_operands.push_back({o.slot, o.role, first, static_cast<int64_t>(r_.row_digests.size())});
    }
  }

  std::vector<PendingFingerprints> finish() {
    if (open_) close();
    r_.row_digests.shrink_to_fit();
    return std::move(out_);
  }

 private:
  void begin(int64_t seq) {
    open_ = true;
    f_ = PendingFingerprints{};
    f_.seq = seq;
    f_.rows_begin = static_cast<int32_t>(r_.row_operands.size());
    in_ = Hasher();
    outs_ = Hasher();
    in_ok_ = out_ok_ = true;
    any_in_ = any_out_ = false;
  }
  void close() {
    f_.rows_end = static_cast<int32_t>(r_.row_operands.size());
    f_.has_inputs = any_in_ && in_ok_;
    f_.has_outputs = any_out_ && out_ok_;
    f_.inputs = f_.has_inputs ? in_.value() : 0;
    f_.outputs = f_.has_outputs ? outs_.value() : 0;
    out_.push_back(f_);
    open_ = false;
  }

  bool rows_;
  RankOps& r_;
  std::vector<PendingFingerprints> out_;
  PendingFingerprints f_;
  Hasher in_, outs_;
  bool open_ = false, in_ok_ = true, out_ok_ = true, any_in_ = false, any_out_ = false;
};

}  // namespace

const std::string& RankOps::name(int64_t id) const {
  static const std::string kEmpty;
  return id > 0 && id < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(id)] : kEmpty;
}

const OpRecord* RankOps::at(int64_t seq) const {
  return seq >= 0 && seq < size() ? &ops[static_cast<size_t>(seq)] : nullptr;
}

const OpExtra* RankOps::extra(const OpRecord& op) const {
  return op.extra >= 0 ? &extras[static_cast<size_t>(op.extra)] : nullptr;
}

uint64_t RankOps::choice(const OpRecord& op) const {
  if (op.anchor) return extras[static_cast<size_t>(op.extra)].choice;
  return op.name >= 0 && static_cast<size_t>(op.name) < name_choices.size()
             ? name_choices[static_cast<size_t>(op.name)]
             : 0;
}

const GemmInfo* RankOps::gemm(const OpRecord& op) const {
  const OpExtra* x = extra(op);
  if (op.kind() != db::EventKind::kGemm || x == nullptr || x->detail < 0) return nullptr;
  return &gemms[static_cast<size_t>(x->detail)];
}

const db::Collective* RankOps::collective(const OpRecord& op) const {
  const OpExtra* x = extra(op);
  if (op.kind() != db::EventKind::kCollective || x == nullptr || x->detail < 0) return nullptr;
  return &collectives[static_cast<size_t>(x->detail)];
}

std::span<const uint64_t> RankOps::rows(const RowOperand& o) const {
  return std::span<const uint64_t>(row_digests).subspan(static_cast<size_t>(o.begin),
                                                        static_cast<size_t>(o.end - o.begin));
}

std::string kernelFamily(const std::string& name) {
  std::string out;
  int angle = 0, paren = 0;
  for (char c : name) {
    if (c == '<') ++angle;
    if (c == '(' && angle == 0) ++paren;  // the parameter list (not a functor's call operator)
    if (paren == 0 && !std::isdigit(static_cast<unsigned char>(c))) out += c;
    if (c == '>' && angle > 0) --angle;
    if (c == ')' && angle == 0 && paren > 0) --paren;
  }
  return out;
}

namespace {

Status loadNames(db::TraceReader& reader, RankOps& r) {
  if (reader.stringCount() >= std::numeric_limits<int32_t>::max()) {
    return makeError(ErrorCode::kCorrupt, "{} has {} strings; the file is damaged", reader.path(),
                     reader.stringCount());
  }
  // Strings are few (names, not events): copy them once, with each name's choice signature.
  r.names.reserve(static_cast<size_t>(reader.stringCount()) + 1);
  r.names.emplace_back();
  for (int64_t id = 1; id <= reader.stringCount(); ++id) r.names.push_back(reader.str(id));
  r.name_choices.reserve(r.names.size());
  for (const std::string& n : r.names) r.name_choices.push_back(Hasher().add(n).value());
  return Status::ok();
}

// The library ops, each with its key and choice, as extras (in seq order), and the operands'
// fingerprints merged in: the result is sorted by seq.
struct ExtraAt {
  int64_t seq;
  uint64_t key;
  bool anchor;
};

Status loadExtras(db::TraceReader& reader, const KeyOptions& options, const LoadSchedule& schedule,
                  RankOps& r, std::vector<ExtraAt>& at) {
  // Operands are streamed and folded as they are read: nothing per operand is kept but the row
  // digests of batch mode. (schedule.heavy let two loads take turns when this was a whole-table
  // vector; it is kept for the row digests.)
  std::vector<PendingFingerprints> fps;
  {
    std::unique_lock<std::mutex> turn;
    if (schedule.heavy != nullptr && options.rows) turn = std::unique_lock<std::mutex>(*schedule.heavy);
    OperandReducer reducer(options.rows, r);
    DETRACE_RETURN_IF_ERROR(reader.forEachOperandFingerprint([&](db::Operand& o) {
      reducer.add(o);
      return Status::ok();
    }));
    fps = reducer.finish();
  }
  std::vector<std::pair<int64_t, OpExtra>> lib;
  std::vector<uint64_t> lib_keys;
  {
    DETRACE_ASSIGN_OR_RETURN(auto gemms, reader.gemms());
    r.gemms.reserve(gemms.size());
    for (const auto& [seq, g] : gemms) {
      OpExtra x;
      x.detail = static_cast<int32_t>(r.gemms.size());
      r.gemms.push_back(compactGemm(g));
      x.choice = gemmChoice(r.gemms.back());
      lib.emplace_back(seq, x);
      lib_keys.push_back(gemmKey(r.gemms.back(), r, options));
    }
  }
  DETRACE_ASSIGN_OR_RETURN(auto collectives, reader.collectives());
  r.collectives.reserve(collectives.size());
  size_t gemm_end = lib.size();
  for (auto& [seq, c] : collectives) {
    OpExtra x;
    x.detail = static_cast<int32_t>(r.collectives.size());
    x.choice = collectiveChoice(c, r);
    lib_keys.push_back(collectiveKey(c, options));
    r.collectives.push_back(c);
    lib.emplace_back(seq, x);
  }
  r.gemm_count = static_cast<int64_t>(gemm_end);
  r.collective_count = static_cast<int64_t>(r.collectives.size());
  // Merge the library ops (GEMMs, then collectives: each sorted by seq) with the fingerprints.
  std::vector<size_t> order(lib.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::inplace_merge(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(gemm_end), order.end(),
                     [&](size_t x, size_t y) { return lib[x].first < lib[y].first; });
  size_t li = 0, fi = 0;
  while (li < order.size() || fi < fps.size()) {
    int64_t ls = li < order.size() ? lib[order[li]].first : INT64_MAX;
    int64_t fs = fi < fps.size() ? fps[fi].seq : INT64_MAX;
    int64_t seq = std::min(ls, fs);
    OpExtra x;
    ExtraAt where{seq, 0, false};
    if (ls == seq) {
      x = lib[order[li]].second;
      where.key = lib_keys[order[li]];
      where.anchor = true;
      ++li;
    }
    if (fs == seq) {
      const PendingFingerprints& f = fps[fi++];
      x.inputs = f.inputs;
      x.outputs = f.outputs;
      x.has_inputs = f.has_inputs;
      x.has_outputs = f.has_outputs;
      x.rows_begin = f.rows_begin;
      x.rows_end = f.rows_end;
    }
    r.extras.push_back(x);
    at.push_back(where);
  }
  return Status::ok();
}

// The alignment key of an event that is not a library op: its kind and its name's family.
class FamilyKeys {
 public:
  explicit FamilyKeys(const RankOps& r) : r_(r), family_(r.names.size(), 0) {}
  uint64_t key(db::EventKind kind, int32_t name) {
    // A name id beyond the string table (a damaged trace) keys like an unnamed event.
    if (name < 0 || static_cast<size_t>(name) >= family_.size()) name = 0;
    if (family_.empty()) return Hasher().add(static_cast<uint64_t>(kind)).value();
    uint64_t& f = family_[static_cast<size_t>(name)];
    if (f == 0) f = Hasher().add(kernelFamily(r_.name(name))).value() | 1;
    return Hasher().add(static_cast<uint64_t>(kind)).add(f).value();
  }

 private:
  const RankOps& r_;
  std::vector<uint64_t> family_;
};

Status loadMarker(db::TraceReader& reader, int64_t seq, int32_t name, RankOps& r) {
  DETRACE_ASSIGN_OR_RETURN(std::optional<db::Marker> m, reader.marker(seq));
  if (!m) return Status::ok();  // a marker event without details: no position
  r.markers.push_back({seq, m->marker_kind, m->domain, m->value, name});
  return Status::ok();
}

// One record per event, in sequence order; keys of library ops are filled in by attachExtras.
Status loadEvents(db::TraceReader& reader, RankOps& r) {
  DETRACE_ASSIGN_OR_RETURN(int64_t count, reader.eventCount());
  if (count >= static_cast<int64_t>(std::numeric_limits<int32_t>::max())) {
    return makeError(ErrorCode::kInvalidArgument, "{} has {} events; diff handles up to 2^31 per rank",
                     reader.path(), count);
  }
  FamilyKeys families(r);
  r.ops.reserve(static_cast<size_t>(std::clamp<int64_t>(count, 0, int64_t{1} << 28)));
  return reader.forEachEventSkeleton([&](const db::TraceReader::EventSkeleton& e) -> Status {
    if (e.seq != static_cast<int64_t>(r.ops.size())) {
      return makeError(ErrorCode::kCorrupt,
                       "{}: event {} follows event {}: sequence numbers must be dense; the file is "
                       "damaged",
                       reader.path(), e.seq, static_cast<int64_t>(r.ops.size()) - 1);
    }
    OpRecord op;
    op.kind_ = static_cast<uint8_t>(e.kind);
    op.name = narrowId(e.name);
    op.parent = e.parent_seq >= 0 ? static_cast<int32_t>(e.parent_seq) : -1;
    op.key = families.key(e.kind, op.name);
    if (e.kind == db::EventKind::kMarker) DETRACE_RETURN_IF_ERROR(loadMarker(reader, e.seq, op.name, r));
    if (r.ops.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return makeError(ErrorCode::kInvalidArgument, "{} has too many events; diff handles up to 2^31 per rank",
                       reader.path());
    }
    r.ops.push_back(op);
    return Status::ok();
  });
}

void attachExtras(const std::vector<ExtraAt>& at, RankOps& r) {
  for (size_t i = 0; i < at.size(); ++i) {
    if (at[i].seq < 0 || at[i].seq >= r.size()) continue;  // details of an event the file lacks
    OpRecord& op = r.ops[static_cast<size_t>(at[i].seq)];
    op.extra = static_cast<int32_t>(i);
    if (at[i].anchor) {
      op.anchor = true;
      op.key = at[i].key;
    }
  }
}

}  // namespace

Result<RankOps> loadRankOps(db::TraceReader& reader, int32_t rank, const KeyOptions& options) {
  return loadRankOps(reader, rank, options, LoadSchedule{});
}

Result<RankOps> loadRankOps(db::TraceReader& reader, int32_t rank, const KeyOptions& options,
                            const LoadSchedule& schedule) {
  RankOps r;
  r.rank = rank;
  DETRACE_RETURN_IF_ERROR(loadNames(reader, r));
  std::vector<ExtraAt> extra_at;
  if (!schedule.operands_last) DETRACE_RETURN_IF_ERROR(loadExtras(reader, options, schedule, r, extra_at));
  DETRACE_RETURN_IF_ERROR(loadEvents(reader, r));
  if (schedule.operands_last) DETRACE_RETURN_IF_ERROR(loadExtras(reader, options, schedule, r, extra_at));
  attachExtras(extra_at, r);
  return r;
}

}  // namespace detrace::replay
