#include "timeline_data.h"

#include "async.h"

#include <algorithm>
#include <map>
#include <thread>

namespace detrace::gui {
namespace {

struct SideEvents {
  std::vector<db::Event> events;  // only what has a time
  int64_t t0 = INT64_MAX;
};

Result<SideEvents> readSide(const db::Run& run, int32_t rank) {
  SideEvents out;
  DETRACE_ASSIGN_OR_RETURN(auto reader, run.openRank(rank));
  DETRACE_ASSIGN_OR_RETURN(db::EventCursor cursor, reader->events());
  while (true) {
    DETRACE_ASSIGN_OR_RETURN(bool more, cursor.next());
    if (!more) break;
    const db::Event& e = cursor.event();
    int64_t t = e.gpu_start_ns >= 0 ? e.gpu_start_ns : e.cpu_ns;
    if (t < 0) continue;
    out.t0 = std::min(out.t0, e.cpu_ns >= 0 ? std::min(t, e.cpu_ns) : t);
    out.events.push_back(e);
  }
  return out;
}

// Spans of one side: a lane per stream for events with GPU times, one for library ops.
void addLanes(const SideEvents& s, int side, const RankView* view, Timeline& out) {
  std::map<int64_t, std::pair<int64_t, int64_t>> children;  // library op seq -> its kernels' extent
  for (const db::Event& e : s.events) {
    if (e.parent_seq < 0 || e.gpu_start_ns < 0) continue;
    auto [it, fresh] = children.try_emplace(e.parent_seq, e.gpu_start_ns, e.gpu_end_ns);
    if (!fresh) {
      it->second.first = std::min(it->second.first, e.gpu_start_ns);
      it->second.second = std::max(it->second.second, e.gpu_end_ns);
    }
  }
  const QString prefix = side == 0 ? "A" : "B";
  std::map<int64_t, Lane> streams;
  Lane library{prefix + " library ops", side, {}, 0};
  for (const db::Event& e : s.events) {
    Span span;
    span.seq = e.seq;
    span.kind = e.kind;
    span.status = view ? static_cast<int8_t>(view->statusOf(side, e.seq)) : 0;
    bool library_op = e.kind == db::EventKind::kGemm || e.kind == db::EventKind::kCollective;
    if (library_op || e.gpu_start_ns < 0) {
      auto it = children.find(e.seq);
      span.start = (it != children.end() ? it->second.first : e.cpu_ns) - s.t0;
      span.end =
          (it != children.end() ? std::max(it->second.second, it->second.first) : e.cpu_ns) - s.t0;
      library.spans.push_back(span);
      continue;
    }
    span.start = e.gpu_start_ns - s.t0;
    span.end = std::max(e.gpu_end_ns, e.gpu_start_ns) - s.t0;
    Lane& lane = streams[e.stream];
    lane.side = side;
    lane.label = QString("%1 stream %2").arg(prefix).arg(e.stream);
    lane.spans.push_back(span);
  }
  auto finish = [&out](Lane lane) {
    if (lane.spans.empty()) return;
    std::stable_sort(lane.spans.begin(), lane.spans.end(),
                     [](const Span& x, const Span& y) { return x.start < y.start; });
    for (const Span& sp : lane.spans) {
      lane.longest = std::max(lane.longest, sp.end - sp.start);
      out.end_ns = std::max(out.end_ns, sp.end);
    }
    out.lanes.push_back(std::move(lane));
  };
  finish(std::move(library));
  for (auto& [stream, lane] : streams) finish(std::move(lane));
}

// Shifts run B's lanes so that its first divergence starts where run A's does.
void alignFirstDivergence(Timeline& t) {
  auto [la, ia] = t.find(0, t.first_seq[0]);
  auto [lb, ib] = t.find(1, t.first_seq[1]);
  if (la < 0 || lb < 0) return;
  t.b_shift_ns = t.lanes[static_cast<size_t>(la)].spans[static_cast<size_t>(ia)].start -
                 t.lanes[static_cast<size_t>(lb)].spans[static_cast<size_t>(ib)].start;
  t.end_ns = 0;
  for (Lane& lane : t.lanes) {
    for (Span& s : lane.spans) {
      if (lane.side == 1) {
        s.start += t.b_shift_ns;
        s.end += t.b_shift_ns;
      }
      t.end_ns = std::max(t.end_ns, s.end);
    }
  }
}

}  // namespace

std::pair<int, int64_t> Timeline::find(int side, int64_t seq) const {
  for (size_t l = 0; l < lanes.size(); ++l) {
    if (lanes[l].side != side) continue;
    for (size_t i = 0; i < lanes[l].spans.size(); ++i) {
      if (lanes[l].spans[i].seq == seq) return {static_cast<int>(l), static_cast<int64_t>(i)};
    }
  }
  return {-1, -1};
}

Result<std::shared_ptr<const Timeline>> loadTimeline(const Analysis& analysis, int32_t rank) {
  auto out = std::make_shared<Timeline>();
  out->rank = rank;
  std::shared_ptr<const RankView> view = analysis.rank(rank);
  // Neither side may throw past its thread while the other is joinable (std::terminate).
  auto read_b = [&] { return readSide(analysis.runs[analysis.b], rank); };
  auto read_a = [&] { return readSide(analysis.runs[analysis.a], rank); };
  std::optional<Result<SideEvents>> b;
  std::thread other([&] { b.emplace(runCaught(read_b)); });
  Result<SideEvents> a = runCaught(read_a);
  other.join();
  if (!a.isOk()) return a.status();
  if (!b->isOk()) return b->status();
  addLanes(*a, 0, view.get(), *out);
  addLanes(**b, 1, view.get(), *out);
  if (const replay::RankDiff* rd = analysis.rankDiff(rank); rd && rd->first) {
    out->first_seq[0] = rd->first->a;
    out->first_seq[1] = rd->first->b;
    alignFirstDivergence(*out);
  }
  return std::shared_ptr<const Timeline>(std::move(out));
}

}  // namespace detrace::gui
