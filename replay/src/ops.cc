#include "detrace/replay/ops.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

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

uint64_t gemmKey(const db::Gemm& g, const RankOps& r, const KeyOptions& o) {
  Hasher h;
  h.add(static_cast<uint64_t>(db::EventKind::kGemm)).add(r.name(g.api));
  h.add(static_cast<uint64_t>(g.trans_a)).add(static_cast<uint64_t>(g.trans_b));
  h.add(static_cast<uint64_t>(o.batch_dim == BatchDim::kM ? -1 : g.m));
  h.add(static_cast<uint64_t>(o.batch_dim == BatchDim::kN ? -1 : g.n));
  h.add(static_cast<uint64_t>(g.k)).add(static_cast<uint64_t>(g.batch_count));
  for (db::DType t : {g.a_dtype, g.b_dtype, g.c_dtype, g.d_dtype}) h.add(static_cast<uint64_t>(t));
  return h.value();
}

uint64_t gemmChoice(const db::Gemm& g) {
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

// Digests of the op's inputs and outputs, each combined in slot order; absent if any is missing.
void addOperands(OpRecord& op, const std::vector<db::Operand>& operands, size_t begin, size_t end) {
  Hasher in, out;
  bool in_ok = true, out_ok = true, any_in = false, any_out = false;
  for (size_t i = begin; i < end; ++i) {
    const db::Operand& o = operands[i];
    bool is_in = o.role == db::OperandRole::kInput || o.role == db::OperandRole::kInOut;
    bool is_out = o.role == db::OperandRole::kOutput || o.role == db::OperandRole::kInOut;
    if (is_in) {
      any_in = true;
      in_ok &= o.has_digest;
      in.add(static_cast<uint64_t>(o.slot)).add(o.digest);
    }
    if (is_out) {
      any_out = true;
      out_ok &= o.has_digest;
      out.add(static_cast<uint64_t>(o.slot)).add(o.digest);
    }
  }
  op.has_inputs = any_in && in_ok;
  op.has_outputs = any_out && out_ok;
  op.inputs = op.has_inputs ? in.value() : 0;
  op.outputs = op.has_outputs ? out.value() : 0;
}

}  // namespace

const std::string& RankOps::name(int64_t id) const {
  static const std::string kEmpty;
  return id > 0 && id < static_cast<int64_t>(names.size()) ? names[static_cast<size_t>(id)] : kEmpty;
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

Result<RankOps> loadRankOps(db::TraceReader& reader, int32_t rank, const KeyOptions& options) {
  RankOps r;
  r.rank = rank;
  // Strings are few (names, not events): copy them once.
  r.names.emplace_back();
  for (int64_t id = 1; id <= reader.stringCount(); ++id) r.names.push_back(reader.str(id));
  DETRACE_ASSIGN_OR_RETURN(r.gemms, reader.gemms());
  DETRACE_ASSIGN_OR_RETURN(r.collectives, reader.collectives());
  DETRACE_ASSIGN_OR_RETURN(r.operands, reader.allOperandFingerprints());
  const std::vector<db::Operand>& operands = r.operands;
  std::unordered_map<int64_t, int32_t> gemm_at, coll_at;
  for (size_t i = 0; i < r.gemms.size(); ++i) gemm_at[r.gemms[i].first] = static_cast<int32_t>(i);
  for (size_t i = 0; i < r.collectives.size(); ++i) {
    coll_at[r.collectives[i].first] = static_cast<int32_t>(i);
  }
  std::unordered_map<int64_t, uint64_t> family_of_name, choice_of_name;
  DETRACE_ASSIGN_OR_RETURN(std::vector<db::TraceReader::EventSkeleton> events, reader.eventSkeletons());
  r.ops.reserve(events.size());
  size_t next_operand = 0;
  for (const db::TraceReader::EventSkeleton& e : events) {
    OpRecord op;
    op.seq = e.seq;
    op.kind = e.kind;
    op.name = e.name;
    op.parent = e.parent_seq;
    if (auto g = gemm_at.find(e.seq); g != gemm_at.end()) {
      op.anchor = true;
      op.detail = g->second;
      op.key = gemmKey(r.gemms[static_cast<size_t>(g->second)].second, r, options);
      op.choice = gemmChoice(r.gemms[static_cast<size_t>(g->second)].second);
    } else if (auto c = coll_at.find(e.seq); c != coll_at.end()) {
      op.anchor = true;
      op.detail = c->second;
      op.key = collectiveKey(r.collectives[static_cast<size_t>(c->second)].second, options);
      op.choice = collectiveChoice(r.collectives[static_cast<size_t>(c->second)].second, r);
    } else {
      auto [it, inserted] = family_of_name.try_emplace(e.name, 0);
      if (inserted) it->second = Hasher().add(kernelFamily(r.name(e.name))).value();
      op.key = Hasher().add(static_cast<uint64_t>(e.kind)).add(it->second).value();
      auto [ch, fresh] = choice_of_name.try_emplace(e.name, 0);
      if (fresh) ch->second = Hasher().add(r.name(e.name)).value();
      op.choice = ch->second;
    }
    while (next_operand < operands.size() && operands[next_operand].seq < e.seq) ++next_operand;
    size_t end = next_operand;
    while (end < operands.size() && operands[end].seq == e.seq) ++end;
    if (end > next_operand) addOperands(op, operands, next_operand, end);
    op.operands_begin = static_cast<int32_t>(next_operand);
    op.operands_end = static_cast<int32_t>(end);
    next_operand = end;
    r.ops.push_back(op);
  }
  return r;
}

}  // namespace detrace::replay
