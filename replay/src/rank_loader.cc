// Loading a rank into RankOps, a chunk of events at a time (ops.h). Each chunk reads its events,
// the GEMMs and collectives among them and their operands' fingerprints with range queries on seq,
// and merges them in sequence order; dropBefore() forgets a prefix of the window.
#include <algorithm>
#include <limits>
#include <optional>

#include <xxhash.h>

#include "detrace/replay/ops.h"

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
  // An epilogue (bias, GeLU, ...) is part of what the call computes; none (1) adds nothing. Where
  // one run predates the epilogue's recording (KeyOptions::epilogues off), no GEMM's key has it.
  if (o.epilogues && g.epilogue > 1) h.add(static_cast<uint64_t>(g.epilogue));
  return h.value();
}

uint64_t gemmChoice(const GemmInfo& g) {
  Hasher h;
  for (int32_t v :
       {g.algo_id, g.tile, g.split_k, g.reduction_scheme, g.stages, g.swizzle, g.custom_option}) {
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
  // PreMulSum's scalar is part of the operator: sums scaled differently are different ops.
  if (c.redop == db::RedOp::kPreMulSum) {
    h.add(static_cast<uint64_t>(c.has_redop_scalar)).add(c.redop_scalar);
  }
  return h.value();
}

uint64_t collectiveChoice(const db::Collective& c, const RankOps& r) {
  return Hasher()
      .add(r.name(c.algo))
      .add(r.name(c.proto))
      .add(static_cast<uint64_t>(c.channels))
      .value();
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
  // cublasLt.h's values fit in 16 bits; any past them (none known) share one key.
  c.epilogue = static_cast<int16_t>(std::clamp<int32_t>(g.epilogue, -1, INT16_MAX));
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

// Folds a chunk's operands, streamed in (seq, slot) order, into one PendingFingerprints per op:
// combined input and output digests, and (for batch mode) the row digests in one flat array.
class OperandReducer {
 public:
  OperandReducer(bool rows, RankOps& r, std::vector<int64_t>& row_seqs)
      : rows_(rows), r_(r), row_seqs_(row_seqs) {}

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
      int64_t first = digestEnd();
      r_.row_digests.insert(r_.row_digests.end(), o.row_digests.begin(), o.row_digests.end());
      r_.row_operands.push_back({o.slot, o.role, first, digestEnd()});
      row_seqs_.push_back(o.seq);
    } else if (rows_ && o.has_digest && o.role == db::OperandRole::kInput && o.bytes > 0) {
      int64_t first = digestEnd();
      r_.row_digests.push_back(o.digest);
      r_.row_operands.push_back({o.slot, o.role, first, digestEnd(), o.bytes});
      row_seqs_.push_back(o.seq);
    }
  }

  std::vector<PendingFingerprints> finish() {
    if (open_) close();
    return std::move(out_);
  }

 private:
  int64_t digestEnd() const { return r_.digest_base + static_cast<int64_t>(r_.row_digests.size()); }
  int32_t rowEnd() const {
    return static_cast<int32_t>(r_.row_base + static_cast<int64_t>(r_.row_operands.size()));
  }

  void begin(int64_t seq) {
    open_ = true;
    f_ = PendingFingerprints{};
    f_.seq = seq;
    f_.rows_begin = rowEnd();
    in_ = Hasher();
    outs_ = Hasher();
    in_ok_ = out_ok_ = true;
    any_in_ = any_out_ = false;
  }
  void close() {
    f_.rows_end = rowEnd();
    f_.has_inputs = any_in_ && in_ok_;
    f_.has_outputs = any_out_ && out_ok_;
    f_.inputs = f_.has_inputs ? in_.value() : 0;
    f_.outputs = f_.has_outputs ? outs_.value() : 0;
    out_.push_back(f_);
    open_ = false;
  }

  bool rows_;
  RankOps& r_;
  std::vector<int64_t>& row_seqs_;
  std::vector<PendingFingerprints> out_;
  PendingFingerprints f_;
  Hasher in_, outs_;
  bool open_ = false, in_ok_ = true, out_ok_ = true, any_in_ = false, any_out_ = false;
};

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

// Where an extra record belongs: its event, and for a library op its alignment key.
struct ExtraAt {
  int64_t seq;
  uint64_t key;
  bool anchor;
};

// A library op of the chunk, before it is merged with the fingerprints.
struct LibraryOp {
  int64_t seq;
  OpExtra extra;
  uint64_t key;
};

// The chunk's operands' fingerprints, by op.
Result<std::vector<PendingFingerprints>> chunkFingerprints(db::TraceReader& reader, int64_t from,
                                                           int64_t to, bool rows, RankOps& r,
                                                           std::vector<int64_t>& row_seqs) {
  OperandReducer reducer(rows, r, row_seqs);
  DETRACE_RETURN_IF_ERROR(reader.forEachOperandFingerprint(from, to, [&](db::Operand& o) {
    reducer.add(o);
    return Status::ok();
  }));
  return reducer.finish();
}

// The chunk's GEMMs, then its collectives (each in seq order), numbered in their rank.
Result<std::vector<LibraryOp>> chunkLibraryOps(db::TraceReader& reader, int64_t from, int64_t to,
                                               const KeyOptions& options, RankOps& r,
                                               std::vector<int64_t>& gemm_seqs,
                                               std::vector<int64_t>& collective_seqs) {
  std::vector<LibraryOp> lib;
  DETRACE_RETURN_IF_ERROR(reader.forEachGemm(from, to, [&](int64_t seq, const db::Gemm& g) {
    OpExtra x;
    x.detail = static_cast<int32_t>(r.gemm_base + static_cast<int64_t>(r.gemms.size()));
    r.gemms.push_back(compactGemm(g));
    gemm_seqs.push_back(seq);
    x.choice = gemmChoice(r.gemms.back());
    lib.push_back({seq, x, gemmKey(r.gemms.back(), r, options)});
    return Status::ok();
  }));
  DETRACE_RETURN_IF_ERROR(
      reader.forEachCollective(from, to, [&](int64_t seq, const db::Collective& c) {
        OpExtra x;
        x.detail =
            static_cast<int32_t>(r.collective_base + static_cast<int64_t>(r.collectives.size()));
        x.choice = collectiveChoice(c, r);
        r.collectives.push_back(c);
        collective_seqs.push_back(seq);
        lib.push_back({seq, x, collectiveKey(c, options)});
        return Status::ok();
      }));
  // GEMMs, then collectives: each sorted by seq; stable, so a seq in both keeps that order.
  std::stable_sort(lib.begin(), lib.end(),
                   [](const LibraryOp& x, const LibraryOp& y) { return x.seq < y.seq; });
  return lib;
}

// Merges the library ops and the fingerprints (both in seq order) into extra records.
void mergeExtras(const std::vector<LibraryOp>& lib, const std::vector<PendingFingerprints>& fps,
                 RankOps& r, std::vector<int64_t>& extra_seqs, std::vector<ExtraAt>& at) {
  size_t li = 0, fi = 0;
  while (li < lib.size() || fi < fps.size()) {
    int64_t ls = li < lib.size() ? lib[li].seq : INT64_MAX;
    int64_t fs = fi < fps.size() ? fps[fi].seq : INT64_MAX;
    int64_t seq = std::min(ls, fs);
    OpExtra x;
    ExtraAt where{seq, 0, false};
    if (ls == seq) {
      x = lib[li].extra;
      where.key = lib[li].key;
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
    extra_seqs.push_back(seq);
    at.push_back(where);
  }
}

Status loadMarker(db::TraceReader& reader, int64_t seq, int32_t name, RankOps& r) {
  DETRACE_ASSIGN_OR_RETURN(std::optional<db::Marker> m, reader.marker(seq));
  if (!m) return Status::ok();  // a marker event without details: no position
  r.markers.push_back({seq, m->marker_kind, m->domain, m->value, name});
  return Status::ok();
}

// How many leading entries of `seqs` (ascending) are before `seq`.
size_t countBefore(const std::vector<int64_t>& seqs, int64_t seq) {
  return static_cast<size_t>(std::lower_bound(seqs.begin(), seqs.end(), seq) - seqs.begin());
}

template <typename T>
void dropFront(std::vector<T>& v, size_t n) {
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size())));
}

}  // namespace

Result<RankLoader> RankLoader::open(db::TraceReader& reader, int32_t rank,
                                    const KeyOptions& options) {
  RankLoader l;
  l.reader_ = &reader;
  l.options_ = options;
  l.r_.rank = rank;
  DETRACE_RETURN_IF_ERROR(loadNames(reader, l.r_));
  l.family_.assign(l.r_.names.size(), 0);
  DETRACE_ASSIGN_OR_RETURN(l.r_.events, reader.eventCount());
  if (l.r_.events >= static_cast<int64_t>(std::numeric_limits<int32_t>::max())) {
    return makeError(ErrorCode::kInvalidArgument,
                     "{} has {} events; diff handles up to 2^31 per rank", reader.path(),
                     l.r_.events);
  }
  DETRACE_ASSIGN_OR_RETURN(l.r_.gemm_count, reader.gemmCount());
  DETRACE_ASSIGN_OR_RETURN(l.r_.collective_count, reader.collectiveCount());
  return l;
}

Status RankLoader::loadTo(int64_t seq, int64_t chunk) {
  while (!loaded_all_ && r_.end() < seq) {
    const int64_t from = r_.end();
    const int64_t to = from + std::min(std::max<int64_t>(chunk, 1), r_.events - from);
    DETRACE_RETURN_IF_ERROR(loadChunk(from, to));
  }
  return Status::ok();
}

uint64_t RankLoader::familyKey(db::EventKind kind, int32_t name) {
  // A name id beyond the string table (a damaged trace) keys like an unnamed event.
  if (name < 0 || static_cast<size_t>(name) >= family_.size()) name = 0;
  if (family_.empty()) return Hasher().add(static_cast<uint64_t>(kind)).value();
  uint64_t& f = family_[static_cast<size_t>(name)];
  if (f == 0) f = Hasher().add(kernelFamily(r_.name(name))).value() | 1;
  return Hasher().add(static_cast<uint64_t>(kind)).add(f).value();
}

// The next event of the window; a library op's key comes from its extra record (loadChunk).
Status RankLoader::addEvent(const db::TraceReader::EventSkeleton& e) {
  if (e.seq != r_.end()) {
    return makeError(ErrorCode::kCorrupt,
                     "{}: event {} follows event {}: sequence numbers must be dense; the file is "
                     "damaged",
                     reader_->path(), e.seq, r_.end() - 1);
  }
  OpRecord op;
  op.kind_ = static_cast<uint8_t>(e.kind);
  op.name = narrowId(e.name);
  op.parent = e.parent_seq >= 0 ? static_cast<int32_t>(e.parent_seq) : -1;
  op.key = familyKey(e.kind, op.name);
  if (e.kind == db::EventKind::kMarker)
    DETRACE_RETURN_IF_ERROR(loadMarker(*reader_, e.seq, op.name, r_));
  r_.ops.push_back(op);
  return Status::ok();
}

// One record per event of [from, to), in sequence order.
Status RankLoader::loadEvents(int64_t from, int64_t to) {
  if (r_.ops.empty()) r_.ops.reserve(static_cast<size_t>(to - from));
  DETRACE_RETURN_IF_ERROR(reader_->forEachEventSkeleton(
      from, to, [this](const db::TraceReader::EventSkeleton& e) { return addEvent(e); }));
  if (r_.end() < to) {
    return makeError(ErrorCode::kCorrupt,
                     "{}: event {} is missing: sequence numbers must be dense; the file is damaged",
                     reader_->path(), r_.end());
  }
  return Status::ok();
}

Status RankLoader::loadChunk(int64_t from, int64_t to) {
  // Details of events the file lacks (seq < 0 or past the last event) go with the first and last
  // chunk, as in one whole read: they count in the numbering, never attach to an event.
  const bool last = to >= r_.events;
  const int64_t lo = from == 0 ? INT64_MIN : from, hi = last ? INT64_MAX : to;
  DETRACE_ASSIGN_OR_RETURN(auto fps,
                           chunkFingerprints(*reader_, lo, hi, options_.rows, r_, row_seqs_));
  DETRACE_ASSIGN_OR_RETURN(
      auto lib, chunkLibraryOps(*reader_, lo, hi, options_, r_, gemm_seqs_, collective_seqs_));
  std::vector<ExtraAt> at;
  const int64_t first_extra = r_.extra_base + static_cast<int64_t>(r_.extras.size());
  mergeExtras(lib, fps, r_, extra_seqs_, at);
  DETRACE_RETURN_IF_ERROR(loadEvents(from, to));
  for (size_t i = 0; i < at.size(); ++i) {
    if (at[i].seq < from || at[i].seq >= to) continue;  // details of an event the file lacks
    OpRecord& op = r_.ops[static_cast<size_t>(at[i].seq - r_.base)];
    op.extra = static_cast<int32_t>(first_extra + static_cast<int64_t>(i));
    if (at[i].anchor) {
      op.anchor = true;
      op.key = at[i].key;
    }
  }
  for (int64_t s = from; s < to; ++s) {
    const OpRecord& op = r_.ops[static_cast<size_t>(s - r_.base)];
    r_.anchor_count += op.anchor;
    r_.deep_launch_count += op.kind() == db::EventKind::kKernel && op.extra >= 0;
  }
  loaded_all_ = last;
  return Status::ok();
}

void RankLoader::fold(int64_t seq, const OpRecord& op) {
  OpsPrelude& p = r_.prelude;
  const OpExtra* x = r_.extra(op);
  if (op.kind() == db::EventKind::kGemm && x != nullptr && x->detail >= 0) p.last_gemm = x->detail;
  if (op.anchor && x->has_outputs) {
    p.since = KernelsSince{seq, 0, {}};
  } else {
    p.since.add(r_, op);
  }
}

void RankLoader::dropBefore(int64_t seq) {
  seq = std::clamp(seq, r_.base, r_.end());
  if (seq == r_.base) return;
  for (int64_t s = r_.base; s < seq; ++s) fold(s, r_.ops[static_cast<size_t>(s - r_.base)]);
  size_t markers = 0;
  for (; markers < r_.markers.size() && r_.markers[markers].seq < seq; ++markers) {
    r_.prelude.markers.apply(r_.markers[markers]);
  }
  dropFront(r_.markers, markers);
  dropFront(r_.ops, static_cast<size_t>(seq - r_.base));
  r_.base = seq;
  // Extras, row operands, GEMMs and collectives are each in seq order.
  size_t extras = countBefore(extra_seqs_, seq);
  dropFront(extra_seqs_, extras);
  dropFront(r_.extras, extras);
  r_.extra_base += static_cast<int64_t>(extras);
  size_t rows = countBefore(row_seqs_, seq);
  const int64_t digest_end = r_.digest_base + static_cast<int64_t>(r_.row_digests.size());
  const int64_t digests =
      (rows < r_.row_operands.size() ? r_.row_operands[rows].begin : digest_end) - r_.digest_base;
  dropFront(row_seqs_, rows);
  dropFront(r_.row_operands, rows);
  r_.row_base += static_cast<int64_t>(rows);
  dropFront(r_.row_digests, static_cast<size_t>(digests));
  r_.digest_base += digests;
  size_t gemms = countBefore(gemm_seqs_, seq), collectives = countBefore(collective_seqs_, seq);
  dropFront(gemm_seqs_, gemms);
  dropFront(r_.gemms, gemms);
  r_.gemm_base += static_cast<int64_t>(gemms);
  dropFront(collective_seqs_, collectives);
  dropFront(r_.collectives, collectives);
  r_.collective_base += static_cast<int64_t>(collectives);
}

Result<RankOps> loadRankOps(db::TraceReader& reader, int32_t rank, const KeyOptions& options) {
  DETRACE_ASSIGN_OR_RETURN(RankLoader loader, RankLoader::open(reader, rank, options));
  DETRACE_RETURN_IF_ERROR(loader.loadTo(INT64_MAX, INT64_MAX));
  return std::move(loader).take();
}

Result<std::vector<GemmInfo>> loadFirstGemms(db::TraceReader& reader, size_t n) {
  DETRACE_ASSIGN_OR_RETURN(auto gemms, reader.gemms(static_cast<int64_t>(n)));
  std::vector<GemmInfo> out;
  for (const auto& [seq, g] : gemms) out.push_back(compactGemm(g));
  return out;
}

}  // namespace detrace::replay
