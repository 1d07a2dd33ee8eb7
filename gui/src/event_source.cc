#include "event_source.h"

#include <QPointer>
#include <map>

#include <fmt/format.h>

#include "detrace/db/run.h"
#include "detrace/replay/diff.h"

namespace detrace::gui {

struct EventSource::State {
  int session = 0;
  QStringList paths;
  std::map<int, db::Run> runs;  // by side
  std::map<std::pair<int, int32_t>, std::unique_ptr<db::TraceReader>> readers;

  Result<db::TraceReader*> reader(int side, int32_t rank) {
    auto key = std::make_pair(side, rank);
    if (auto it = readers.find(key); it != readers.end()) return it->second.get();
    if (side >= paths.size()) return makeError(ErrorCode::kNotFound, "no run on side {}", side);
    if (!runs.count(side)) {
      DETRACE_ASSIGN_OR_RETURN(db::Run run, db::Run::open(paths[side].toStdString()));
      runs.emplace(side, std::move(run));
    }
    DETRACE_ASSIGN_OR_RETURN(auto r, runs.at(side).openRank(rank));
    return (readers[key] = std::move(r)).get();
  }

  // Run A's first rank and the event count of each side on it (-1: no such side or rank).
  Status counts(int32_t* rank, int64_t out[2]) {
    if (paths.isEmpty()) return makeError(ErrorCode::kNotFound, "no run to show");
    if (!runs.count(0)) {
      DETRACE_ASSIGN_OR_RETURN(db::Run run, db::Run::open(paths[0].toStdString()));
      runs.emplace(0, std::move(run));
    }
    if (runs.at(0).ranks().empty())
      return makeError(ErrorCode::kNotFound, "{} holds no trace", paths[0].toStdString());
    *rank = runs.at(0).ranks().front().rank;
    for (int side = 0; side < 2 && side < paths.size(); ++side) {
      auto r = reader(side, *rank);
      if (!r.isOk()) {
        if (side == 0) return r.status();
        continue;  // run B lacks this rank: shown as absent
      }
      DETRACE_ASSIGN_OR_RETURN(out[side], (*r)->eventCount());
    }
    return Status();
  }
};

namespace {

std::string gemmDetail(const db::Gemm& g) {
  std::string algo = g.algo_id >= 0 ? fmt::format("algo {}", g.algo_id) : "algo ?";
  if (g.tile >= 0) algo += fmt::format(" tile {}", g.tile);
  if (g.split_k >= 0) algo += fmt::format(" split-K {}", g.split_k);
  return fmt::format("m={} n={} k={} {}{} {}{} ({})", g.m, g.n, g.k, g.trans_a ? "T" : "N",
                     g.trans_b ? "T" : "N", db::dtypeName(g.a_dtype),
                     g.epilogue > 1 ? " epilogue " + db::epilogueText(g.epilogue) : "", algo);
}

std::string collectiveDetail(db::TraceReader& r, const db::Collective& c) {
  return fmt::format("{} {} count={} {} ({}/{}/{} ch) comm seq {}", db::collOpName(c.op),
                     db::dtypeName(c.dtype), c.count, db::redOpText(c),
                     r.str(c.algo).empty() ? "?" : r.str(c.algo),
                     r.str(c.proto).empty() ? "?" : r.str(c.proto), c.channels, c.comm_seq);
}

EventRow makeRow(db::TraceReader& r, const db::Event& e) {
  EventRow row;
  row.seq = e.seq;
  row.kind = e.kind;
  std::string name = r.str(e.name);
  row.full_name = QString::fromStdString(name);
  row.name = QString::fromStdString(replay::shortKernelName(name, 160));
  row.stream = e.stream;
  row.cpu_ns = e.cpu_ns;
  row.gpu_start_ns = e.gpu_start_ns;
  row.gpu_end_ns = e.gpu_end_ns;
  row.parent = e.parent_seq;
  std::string detail;
  if (e.kind == db::EventKind::kGemm) {
    if (auto g = r.gemm(e.seq); g.isOk() && g->has_value()) detail = gemmDetail(**g);
  } else if (e.kind == db::EventKind::kCollective) {
    if (auto c = r.collective(e.seq); c.isOk() && c->has_value()) detail = collectiveDetail(r, **c);
  } else if (e.has_launch) {
    detail = fmt::format("grid {}x{}x{} block {}x{}x{}", e.launch.grid[0], e.launch.grid[1],
                         e.launch.grid[2], e.launch.block[0], e.launch.block[1], e.launch.block[2]);
  }
  row.detail = QString::fromStdString(detail);
  return row;
}

Result<std::vector<EventRow>> readBlock(db::TraceReader& r, int64_t block) {
  std::vector<EventRow> rows;
  DETRACE_ASSIGN_OR_RETURN(db::EventCursor cursor, r.events(block * EventSource::kBlock,
                                                            (block + 1) * EventSource::kBlock));
  while (true) {
    DETRACE_ASSIGN_OR_RETURN(bool more, cursor.next());
    if (!more) break;
    rows.push_back(makeRow(r, cursor.event()));
  }
  return rows;
}

}  // namespace

EventSource::EventSource(QObject* parent) : QObject(parent), state_(std::make_shared<State>()) {
  worker_ = new QObject;
  worker_->moveToThread(&thread_);
  thread_.setObjectName("detrace-events");
  thread_.start();
}

EventSource::~EventSource() {
  thread_.quit();
  thread_.wait();
  delete worker_;
}

void EventSource::open(int session, const QStringList& paths) {
  QMetaObject::invokeMethod(
      worker_,
      [state = state_, session, paths] {
        state->readers.clear();
        state->runs.clear();
        state->session = session;
        state->paths = paths;
      },
      Qt::QueuedConnection);
}

void EventSource::requestCounts(int session) {
  QPointer<EventSource> self(this);
  QMetaObject::invokeMethod(
      worker_,
      [self, state = state_, session] {
        if (state->session != session) return;
        int32_t rank = 0;
        int64_t counts[2] = {0, -1};
        Status status = state->counts(&rank, counts);
        QMetaObject::invokeMethod(
            self.data(),
            [self, session, rank, a = counts[0], b = counts[1], status] {
              if (!self) return;
              if (!status.isOk()) {
                emit self->failed(session, QString::fromStdString(status.message()));
              } else {
                emit self->countsReady(session, rank, a, b);
              }
            },
            Qt::QueuedConnection);
      },
      Qt::QueuedConnection);
}

void EventSource::request(int session, int side, int32_t rank, int64_t block) {
  QPointer<EventSource> self(this);
  QMetaObject::invokeMethod(
      worker_,
      [self, state = state_, session, side, rank, block] {
        if (state->session != session) return;  // the UI moved on
        Result<db::TraceReader*> reader = state->reader(side, rank);
        auto rows = reader.isOk() ? readBlock(**reader, block)
                                  : Result<std::vector<EventRow>>(reader.status());
        QMetaObject::invokeMethod(
            self.data(),
            [self, session, side, rank, block, rows = std::move(rows)]() mutable {
              if (!self) return;
              if (!rows.isOk()) {
                emit self->failed(session, QString::fromStdString(rows.status().message()));
                return;
              }
              auto shared = std::make_shared<const std::vector<EventRow>>(std::move(*rows));
              emit self->blockReady(session, side, rank, block, shared);
            },
            Qt::QueuedConnection);
      },
      Qt::QueuedConnection);
}

}  // namespace detrace::gui
