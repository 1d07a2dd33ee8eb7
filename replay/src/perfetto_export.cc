// Chrome-trace JSON ("Trace Event Format"): {"traceEvents": [...]} with ts/dur in microseconds.
// pid = rank, tid = stream id + 1 (tid 0 = host-side events without a stream).
#include "detrace/replay/perfetto_export.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace detrace::replay {
namespace {

using db::Event;
using db::EventKind;
using db::TraceReader;

std::string jsonString(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json collectiveArgs(const TraceReader& r, const db::Collective& c) {
  return {{"op", db::collOpName(c.op)},  {"dtype", db::dtypeName(c.dtype)},
          {"count", c.count},            {"redop", db::redOpText(c)},
          {"comm_rank", c.comm_rank},    {"comm_nranks", c.comm_nranks},
          {"comm_seq", c.comm_seq},      {"algo", r.str(c.algo)},
          {"proto", r.str(c.proto)},     {"channels", c.channels}};
}

nlohmann::json gemmArgs(const TraceReader& r, const db::Gemm& g) {
  return {{"api", r.str(g.api)},       {"m", g.m},         {"n", g.n},
          {"k", g.k},                  {"trans_a", g.trans_a}, {"trans_b", g.trans_b},
          {"batch", g.batch_count},    {"a_dtype", db::dtypeName(g.a_dtype)},
          {"d_dtype", db::dtypeName(g.d_dtype)}, {"compute", r.str(g.compute_type)},
          {"algo_id", g.algo_id},      {"tile", g.tile},   {"split_k", g.split_k},
          {"stages", g.stages},      {"epilogue", db::epilogueText(g.epilogue)}};
}

nlohmann::json kernelArgs(const Event& e) {
  const auto& l = e.launch;
  return {{"grid", fmt::format("{}x{}x{}", l.grid[0], l.grid[1], l.grid[2])},
          {"block", fmt::format("{}x{}x{}", l.block[0], l.block[1], l.block[2])},
          {"smem", std::max(0, l.smem_static) + std::max(0, l.smem_dynamic)},
          {"registers", l.registers}};
}

struct RankExporter {
  TraceReader& reader;
  int32_t rank;
  int64_t t0;
  std::FILE* out;
  bool& first;
  std::map<int64_t, db::Collective> collectives;
  std::map<int64_t, db::Gemm> gemms;

  void emit(const std::string& json) {
    std::fputs(first ? "\n" : ",\n", out);
    first = false;
    std::fputs(json.c_str(), out);
  }

  std::string ts(int64_t ns) const { return fmt::format("{:.3f}", static_cast<double>(ns - t0) / 1e3); }

  void metadata() {
    const db::RankInfo& info = reader.rank();
    emit(fmt::format(R"({{"ph":"M","pid":{},"name":"process_name","args":{{"name":{}}}}})", rank,
                     jsonString(fmt::format("rank {} ({} {})", rank, info.host, info.gpu_name))));
    emit(fmt::format(R"({{"ph":"M","pid":{},"name":"process_sort_index","args":{{"sort_index":{}}}}})",
                     rank, rank));
    emit(fmt::format(R"({{"ph":"M","pid":{},"tid":0,"name":"thread_name","args":{{"name":"host"}}}})",
                     rank));
    for (const db::StreamInfo& s : reader.streams()) {
      emit(fmt::format(R"({{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{{"name":{}}}}})",
                       rank, s.id + 1, jsonString(fmt::format("stream {} (0x{:x})", s.id, s.handle))));
    }
  }

  void event(const Event& e) {
    nlohmann::json args = {{"seq", e.seq}};
    if (e.has_launch) args.update(kernelArgs(e));
    if (auto it = collectives.find(e.seq); it != collectives.end()) {
      args.update(collectiveArgs(reader, it->second));
    }
    if (auto it = gemms.find(e.seq); it != gemms.end()) args.update(gemmArgs(reader, it->second));
    if (e.graph_id >= 0) args["graph_id"] = e.graph_id;
    std::string name = reader.str(e.name);
    if (name.empty()) name = db::eventKindName(e.kind);
    int64_t tid = e.stream >= 0 ? e.stream + 1 : 0;
    std::string common = fmt::format(R"("pid":{},"tid":{},"name":{},"cat":"{}","args":{})", rank, tid,
                                     jsonString(name), db::eventKindName(e.kind),
                                     args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (e.gpu_start_ns >= 0 && e.gpu_end_ns >= e.gpu_start_ns) {
      emit(fmt::format(R"({{"ph":"X","ts":{},"dur":{:.3f},{}}})", ts(e.gpu_start_ns),
                       static_cast<double>(e.gpu_end_ns - e.gpu_start_ns) / 1e3, common));
    } else if (e.cpu_ns >= 0) {
      emit(fmt::format(R"({{"ph":"i","s":"t","ts":{},{}}})", ts(e.cpu_ns), common));
    }
  }
};

}  // namespace

Status exportPerfetto(const db::Run& run, std::FILE* out, const ProgressFn& progress) {
  std::vector<std::unique_ptr<TraceReader>> readers;
  int64_t t0 = INT64_MAX, total = 0;
  for (const db::RankFile& rf : run.ranks()) {
    DETRACE_ASSIGN_OR_RETURN(auto r, TraceReader::open(rf.path));
    DETRACE_ASSIGN_OR_RETURN(db::TimeSpan span, r->timeSpan());
    if (span.first_ns >= 0) t0 = std::min(t0, span.first_ns);
    DETRACE_ASSIGN_OR_RETURN(int64_t n, r->eventCount());
    total += n;
    readers.push_back(std::move(r));
  }
  if (t0 == INT64_MAX) t0 = 0;
  std::fputs(R"({"displayTimeUnit":"ns","otherData":{"producer":"detrace"},"traceEvents":[)", out);
  bool first = true;
  int64_t done = 0;
  for (size_t i = 0; i < readers.size(); ++i) {
    RankExporter x{*readers[i], run.ranks()[i].rank, t0, out, first, {}, {}};
    DETRACE_ASSIGN_OR_RETURN(auto colls, x.reader.collectives());
    x.collectives.insert(colls.begin(), colls.end());
    DETRACE_ASSIGN_OR_RETURN(auto gemms, x.reader.gemms());
    x.gemms.insert(gemms.begin(), gemms.end());
    x.metadata();
    DETRACE_ASSIGN_OR_RETURN(auto cursor, x.reader.events());
    for (;;) {
      DETRACE_ASSIGN_OR_RETURN(bool more, cursor.next());
      if (!more) break;
      x.event(cursor.event());
      if (progress && ++done % 200000 == 0) progress(done, total);
    }
  }
  std::fputs("\n]}\n", out);
  if (std::ferror(out)) return makeError(ErrorCode::kIo, "writing the export failed (disk full?)");
  if (progress) progress(total, total);
  return Status::ok();
}

}  // namespace detrace::replay
