#include "replay_backend.h"

#include "detrace/replay/replay.h"

namespace detrace::gui {
namespace {

QString distanceText(const std::optional<replay::Distance>& d) {
  if (!d) return "—";
  if (d->identical()) return "0 ULP (bit-identical)";
  QString text = QString("max %1 ULP, %2 element(s) differ").arg(d->max_ulp).arg(d->differing);
  if (d->nan_mismatch > 0) text += QString(", %1 NaN mismatch(es)").arg(d->nan_mismatch);
  return text;
}

QString resultText(const replay::ImplResult& r) {
  if (!r.skipped.empty()) return "skipped: " + QString::fromStdString(r.skipped);
  if (!r.error.empty()) return "error: " + QString::fromStdString(r.error);
  QString det = r.distinct <= 1 ? "deterministic" : QString("%1 distinct outputs").arg(r.distinct);
  if (!r.matches_recorded) return det;
  return (*r.matches_recorded == r.runs ? "reproduces the recorded output, "
                                        : "does not reproduce the recorded output, ") +
         det;
}

ReplayRow rowOf(const replay::ImplResult& r) {
  ReplayRow row;
  row.impl = QString::fromStdString(r.name);
  row.description = QString::fromStdString(r.description);
  row.device = r.gpu ? "GPU" : "CPU";
  row.result = resultText(r);
  row.runs = r.runs;
  row.distinct = r.distinct;
  row.matches_recorded =
      r.matches_recorded ? QString("%1/%2").arg(*r.matches_recorded).arg(r.runs) : QString("—");
  row.to_recorded = distanceText(r.to_recorded);
  row.to_reference = distanceText(r.to_reference);
  row.batch_rows = "—";
  row.control = r.control;
  return row;
}

replay::ReplayOptions optionsOf(const ReplayRequest& q, const ReplayProgressFn& progress) {
  replay::ReplayOptions o;
  for (const QString& s : q.impls) o.impls.push_back(s.toStdString());
  o.repeat = q.repeat;
  o.allow_gpu = q.allow_gpu;
  o.progress = [progress](int done, int total, std::string_view what) {
    if (progress)
      progress(done, total, QString::fromUtf8(what.data(), static_cast<qsizetype>(what.size())));
  };
  return o;
}

class LibraryReplayBackend : public ReplayBackend {
 public:
  LibraryReplayBackend(const db::Run& a, const db::Run& b) : a_(a), b_(b) {}

  bool available(QString* why) const override {
    if (replay::replayAvailable()) return true;
    if (why)
      *why = "this build of detrace-view has no GPU kernels (CUDA 13 was not found at build time)";
    return false;
  }

  ReplayOutcome run(const ReplayRequest& q, const ReplayProgressFn& progress) override {
    ReplayOutcome out;
    replay::ReplayOptions o = optionsOf(q, progress);
    if (q.target == ReplayRequest::Target::kPair) {
      auto r = replay::replayPair(a_, {q.rank, q.seq_a}, b_, {q.rank, q.seq_b}, o);
      if (!r.isOk()) return {{}, {}, {}, QString::fromStdString(r.status().message())};
      out.title = QString::fromStdString(r->a.op + "  vs  " + r->b.op);
      out.report = QString::fromStdString(replay::formatPair(*r));
      for (const replay::ImplResult& i : r->a.impls) {
        ReplayRow row = rowOf(i);
        for (const replay::PairImplResult& p : r->impls) {
          if (p.name != i.name) continue;
          row.batch_rows = p.skipped.empty()
                               ? QString("%1/%2 rows equal").arg(p.rows_equal).arg(p.rows)
                               : "skipped: " + QString::fromStdString(p.skipped);
        }
        out.rows.push_back(row);
      }
      return out;
    }
    const bool in_a = q.target == ReplayRequest::Target::kEventA;
    auto r = replay::replayEvent(in_a ? a_ : b_, {q.rank, in_a ? q.seq_a : q.seq_b}, o);
    if (!r.isOk()) return {{}, {}, {}, QString::fromStdString(r.status().message())};
    out.title = QString::fromStdString(r->op);
    out.report = QString::fromStdString(replay::formatReplay(*r));
    for (const replay::ImplResult& i : r->impls) out.rows.push_back(rowOf(i));
    return out;
  }

 private:
  db::Run a_, b_;
};

}  // namespace

std::shared_ptr<ReplayBackend> makeLibraryReplayBackend(const db::Run& a, const db::Run& b) {
  return std::make_shared<LibraryReplayBackend>(a, b);
}

}  // namespace detrace::gui
