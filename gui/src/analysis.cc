#include "analysis.h"

#include <QFileInfo>
#include <thread>

#include "async.h"
#include "detrace/replay/diff_report.h"

namespace detrace::gui {
namespace {

// Both sides' event kinds and names for one rank, loaded in parallel (one connection per thread).
Status loadSkeletons(const db::Run& a, const db::Run& b, RankView& view) {
  auto load = [&view](const db::Run& run, int side) -> Status {
    DETRACE_ASSIGN_OR_RETURN(auto reader, run.openRank(view.rank));
    DETRACE_ASSIGN_OR_RETURN(view.events[side], reader->eventSkeletons());
    view.names[side].emplace_back();
    for (int64_t id = 1; id <= reader->stringCount(); ++id)
      view.names[side].push_back(reader->str(id));
    return Status();
  };
  // Neither side may throw past its thread while the other is joinable (std::terminate).
  auto caught = [&load](const db::Run& run, int side) {
    auto work = [&] { return load(run, side); };
    return runCaught(work);
  };
  Status sb;
  std::thread other([&] { sb = caught(b, 1); });
  Status sa = caught(a, 0);
  other.join();
  return sa.isOk() ? sb : sa;
}

std::shared_ptr<RankView> makeRankView(const replay::RankDiff& rd) {
  auto view = std::make_shared<RankView>();
  view->rank = rd.rank;
  view->rows = replay::AlignedRows(rd);
  for (const replay::PairDiff& d : rd.differing) {
    if (d.a >= 0) view->differing[0][d.a] = d.status;
    if (d.b >= 0) view->differing[1][d.b] = d.status;
  }
  return view;
}

// Which two runs to compare: with three or more, the first of the largest class against the first
// of the next class (the split groupRuns explains first).
void pickPair(Analysis& out) {
  out.a = 0;
  out.b = out.runs.size() > 1 ? 1 : 0;
  if (!out.groups || out.groups->classes.empty()) return;
  const auto& classes = out.groups->classes;
  out.a = classes[0][0];
  out.b = classes.size() > 1 ? classes[1][0] : (classes[0].size() > 1 ? classes[0][1] : out.a);
}

}  // namespace

const std::string& RankView::name(int side, int64_t id) const {
  static const std::string kEmpty;
  const auto& n = names[side];
  return id > 0 && id < static_cast<int64_t>(n.size()) ? n[static_cast<size_t>(id)] : kEmpty;
}

replay::PairStatus RankView::statusOf(int side, int64_t seq) const {
  auto it = differing[side].find(seq);
  return it == differing[side].end() ? replay::PairStatus::kIdentical : it->second;
}

std::shared_ptr<const RankView> Analysis::rank(int32_t r) const {
  for (const auto& v : ranks) {
    if (v->rank == r) return v;
  }
  return nullptr;
}

const replay::RankDiff* Analysis::rankDiff(int32_t r) const {
  for (const replay::RankDiff& d : diff.ranks) {
    if (d.rank == r) return &d;
  }
  return nullptr;
}

const replay::RankDiff* Analysis::originRank() const {
  return diff.origin_rank ? rankDiff(*diff.origin_rank) : nullptr;
}

std::string Analysis::nextStep() const {
  const replay::RankDiff* origin = originRank();
  return origin ? replay::nextStepText(*origin, {label_a.toStdString(), label_b.toStdString()})
                : "";
}

QString runLabel(const QString& path) {
  QFileInfo info(path);
  QString name = info.fileName().isEmpty() ? QFileInfo(info.path()).fileName() : info.fileName();
  return name.isEmpty() ? path : name;
}

Result<std::shared_ptr<const Analysis>> analyse(const QStringList& paths,
                                                const ProgressFn& progress) {
  auto out = std::make_shared<Analysis>();
  out->paths = paths;
  for (const QString& p : paths) {
    progress(QString("opening %1").arg(runLabel(p)));
    DETRACE_ASSIGN_OR_RETURN(db::Run run, db::Run::open(p.toStdString()));
    out->runs.push_back(std::move(run));
  }
  if (out->runs.size() < 2)
    return makeError(ErrorCode::kInvalidArgument, "open two runs to compare them");
  if (out->runs.size() > 2) {
    progress(QString("grouping %1 runs into bit-identical classes").arg(out->runs.size()));
    DETRACE_ASSIGN_OR_RETURN(out->groups, replay::groupRuns(out->runs));
  }
  pickPair(*out);
  out->label_a = runLabel(paths[static_cast<int>(out->a)]);
  out->label_b = runLabel(paths[static_cast<int>(out->b)]);
  progress(QString("aligning and classifying %1 against %2").arg(out->label_a, out->label_b));
  DETRACE_ASSIGN_OR_RETURN(out->diff, replay::diffRuns(out->runs[out->a], out->runs[out->b]));
  replay::DiffLabels labels{out->label_a.toStdString(), out->label_b.toStdString()};
  out->report = replay::formatDiff(out->diff, labels);
  // Names from the trace (kernels, NVTX ranges) are the program's bytes, not always UTF-8.
  out->json = replay::diffJson(out->diff, labels).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  for (const replay::RankDiff& rd : out->diff.ranks) {
    progress(QString("indexing rank %1").arg(rd.rank));
    std::shared_ptr<RankView> view = makeRankView(rd);
    DETRACE_RETURN_IF_ERROR(loadSkeletons(out->runs[out->a], out->runs[out->b], *view));
    out->ranks.push_back(std::move(view));
  }
  return std::shared_ptr<const Analysis>(std::move(out));
}

}  // namespace detrace::gui
