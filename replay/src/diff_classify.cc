// How an aligned pair is classified (diff.h): from what ran it and from its fingerprints, or, in
// batch-size mode, from the request's rows.
#include <algorithm>
#include <optional>
#include <span>
#include <unordered_set>

#include "diff_internal.h"

namespace detrace::replay {

namespace {
const OpExtra kNoFingerprints;
}  // namespace

const OpExtra& fingerprintsOf(const RankOps& r, const OpRecord& op) {
  const OpExtra* x = r.extra(op);
  return x != nullptr ? *x : kNoFingerprints;
}

PairStatus contentStatus(const RankOps& ra, const OpRecord& oa, const RankOps& rb,
                         const OpRecord& ob, bool diverged_before) {
  const OpExtra& a = fingerprintsOf(ra, oa);
  const OpExtra& b = fingerprintsOf(rb, ob);
  bool inputs_known = a.has_inputs && b.has_inputs;
  bool outputs_known = a.has_outputs && b.has_outputs;
  bool outputs_differ = outputs_known && a.outputs != b.outputs;
  if (inputs_known && a.inputs != b.inputs) {
    return outputs_known && !outputs_differ ? PairStatus::kIdentical : PairStatus::kPropagated;
  }
  if (!outputs_differ) return PairStatus::kIdentical;
  if (inputs_known) return PairStatus::kNondeterministic;
  // Outputs differ and the inputs were not fingerprinted: blame the op only if nothing diverged
  // before it on this rank.
  return diverged_before ? PairStatus::kPropagated : PairStatus::kNondeterministic;
}

PairStatus classify(const RankOps& ra, const OpRecord& oa, const RankOps& rb, const OpRecord& ob,
                    bool diverged_before) {
  if (ra.choice(oa) != rb.choice(ob)) return PairStatus::kKernelSelection;
  return contentStatus(ra, oa, rb, ob, diverged_before);
}

namespace {

// Every row fingerprint of the operand with fewer rows appears among the other's rows.
bool rowsContained(std::span<const uint64_t> x, std::span<const uint64_t> y) {
  std::span<const uint64_t> small = x.size() <= y.size() ? x : y;
  std::span<const uint64_t> large = x.size() <= y.size() ? y : x;
  std::unordered_set<uint64_t> rows(large.begin(), large.end());
  for (uint64_t d : small) {
    if (!rows.count(d)) return false;
  }
  return true;
}

}  // namespace

std::optional<PairStatus> rowsStatus(const RankOps& ra, const OpRecord& oa, const RankOps& rb,
                                     const OpRecord& ob) {
  const OpExtra& a = fingerprintsOf(ra, oa);
  const OpExtra& b = fingerprintsOf(rb, ob);
  bool have_in = false, have_out = false, in_match = true, out_match = true;
  const bool gemm = oa.kind() == db::EventKind::kGemm && ob.kind() == db::EventKind::kGemm;
  for (int32_t i = a.rows_begin; i < a.rows_end; ++i) {
    const RowOperand& x = ra.rowOperand(i);
    if (x.end == x.begin) continue;
    for (int32_t j = b.rows_begin; j < b.rows_end; ++j) {
      const RowOperand& y = rb.rowOperand(j);
      if (y.slot != x.slot || y.end == y.begin) continue;
      if (x.whole_bytes > 0 || y.whole_bytes > 0) {
        // A GEMM input without rows on both sides and of one size in both (a weight, recorded
        // with --row-digests tokens) is the same tensor whatever the batch: its whole digests
        // must match. One of another size is the batch's (a transposed activation): no verdict.
        if (gemm && x.whole_bytes == y.whole_bytes) in_match &= ra.rows(x)[0] == rb.rows(y)[0];
        continue;
      }
      bool match = rowsContained(ra.rows(x), rb.rows(y));
      if (x.role != db::OperandRole::kOutput) {
        have_in = true;
        in_match &= match;
      }
      if (x.role != db::OperandRole::kInput) {
        have_out = true;
        out_match &= match;
      }
    }
  }
  if (!have_in || !have_out) return std::nullopt;
  if (!in_match) return PairStatus::kPropagated;
  return out_match ? PairStatus::kIdentical : PairStatus::kBatchVariant;
}

PairStatus classifyBatch(const RankOps& ra, const OpRecord& oa, const RankOps& rb,
                         const OpRecord& ob) {
  if (std::optional<PairStatus> rows = rowsStatus(ra, oa, rb, ob)) return *rows;
  return ra.choice(oa) != rb.choice(ob) ? PairStatus::kKernelSelection : PairStatus::kIdentical;
}

ChoiceKey choiceKey(const CollectiveChoiceChange& c) {
  return {static_cast<int>(c.op),
          static_cast<int>(c.dtype),
          c.count_a,
          c.count_b,
          c.algo_a,
          c.proto_a,
          c.channels_a,
          c.algo_b,
          c.proto_b,
          c.channels_b};
}

void mergeChoice(CollectiveChoiceChange& into, const CollectiveChoiceChange& from) {
  into.calls += from.calls;
  into.unchanged += from.unchanged;
  into.changed += from.changed;
  into.inputs_differed += from.inputs_differed;
  into.unknown += from.unknown;
  for (int32_t r : from.ranks) {
    auto at = std::lower_bound(into.ranks.begin(), into.ranks.end(), r);
    if (at == into.ranks.end() || *at != r) into.ranks.insert(at, r);
  }
}

}  // namespace detrace::replay
