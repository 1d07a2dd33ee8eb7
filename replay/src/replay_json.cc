// `detrace replay --json`: the same facts as the tables, for tools. Absent measurements are null.
#include <fmt/format.h>

#include "detrace/replay/replay.h"

namespace detrace::replay {
namespace {

using nlohmann::json;

json distanceJson(const std::optional<Distance>& d) {
  if (!d) return nullptr;
  return {{"differing", d->differing},   {"nan_mismatch", d->nan_mismatch},
          {"max_ulp", d->max_ulp},       {"max_abs", d->max_abs},
          {"max_rel", d->max_rel},       {"worst_index", d->worst}};
}

json implJson(const ImplResult& i) {
  json j = {{"name", i.name},
            {"description", i.description},
            {"device", i.gpu ? "gpu" : "cpu"},
            {"control", i.control},
            {"status", !i.skipped.empty() ? "skipped" : !i.error.empty() ? "failed" : "ran"},
            {"reason", !i.skipped.empty() ? i.skipped : i.error},
            {"runs", i.runs},
            {"distinct", i.distinct},
            {"digest", i.ran() ? json(fmt::format("{:016x}", i.digest)) : json(nullptr)},
            {"matches_recorded", i.matches_recorded ? json(*i.matches_recorded) : json(nullptr)},
            {"to_recorded", distanceJson(i.to_recorded)},
            {"to_reference", distanceJson(i.to_reference)}};
  return j;
}

}  // namespace

json replayJson(const ReplayResult& r) {
  json impls = json::array();
  for (const auto& i : r.impls) impls.push_back(implJson(i));
  return {{"run", r.run},
          {"rank", r.rank},
          {"event", r.seq},
          {"kind", r.kind},
          {"op", r.op},
          {"output", {{"dtype", db::dtypeName(r.output.dtype)},
                      {"rows", r.output.rows},
                      {"cols", r.output.cols}}},
          {"tokens", r.tokens},
          {"recorded", r.recorded.empty() ? json(nullptr) : json(r.recorded)},
          {"notes", r.notes},
          {"implementations", impls},
          {"reproducing", r.reproducing()}};
}

json pairJson(const PairResult& p) {
  json rows = json::array();
  for (auto [a, b] : p.rows) rows.push_back({a, b});
  json impls = json::array();
  for (const auto& i : p.impls) {
    impls.push_back({{"name", i.name},
                     {"device", i.gpu ? "gpu" : "cpu"},
                     {"control", i.control},
                     {"status", i.skipped.empty() ? "ran" : "skipped"},
                     {"reason", i.skipped},
                     {"rows", i.rows},
                     {"rows_equal", i.rows_equal},
                     {"batch_invariant", i.skipped.empty() ? json(i.invariant()) : json(nullptr)}});
  }
  return {{"a", replayJson(p.a)},
          {"b", replayJson(p.b)},
          {"rows", rows},
          {"recorded_rows_equal",
           p.recorded_rows_equal ? json(*p.recorded_rows_equal) : json(nullptr)},
          {"implementations", impls}};
}

}  // namespace detrace::replay
