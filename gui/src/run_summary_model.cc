#include "run_summary_model.h"

namespace detrace::gui {

void RunSummaryModel::setRuns(std::vector<replay::RunSummary> runs) {
  beginResetModel();
  runs_ = std::move(runs);
  rows_.clear();
  for (size_t r = 0; r < runs_.size(); ++r) {
    for (size_t k = 0; k < runs_[r].ranks.size(); ++k) rows_.emplace_back(r, k);
  }
  endResetModel();
}

int RunSummaryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int RunSummaryModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant RunSummaryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= static_cast<int>(rows_.size())) return {};
  if (role != Qt::DisplayRole && role != Qt::UserRole) return {};
  auto [run_i, rank_i] = rows_[static_cast<size_t>(index.row())];
  const replay::RunSummary& run = runs_[run_i];
  const replay::RankSummary& r = run.ranks[rank_i];
  auto kind = [&](db::EventKind k) -> qlonglong {
    auto it = r.by_kind.find(k);
    return it == r.by_kind.end() ? 0 : it->second;
  };
  switch (index.column()) {
    case kRun:
      return QString::fromStdString(run.path);
    case kRank:
      return r.info.rank;
    case kGpu:
      return QString::fromStdString(r.info.gpu_name);
    case kEvents:
      return static_cast<qlonglong>(r.events);
    case kKernels:
      return kind(db::EventKind::kKernel);
    case kGemms:
      return kind(db::EventKind::kGemm);
    case kCollectives:
      return kind(db::EventKind::kCollective);
    case kSpan:
      return r.first_ns >= 0 && r.last_ns >= r.first_ns
                 ? QVariant(static_cast<double>(r.last_ns - r.first_ns) / 1e6)
                 : QVariant();
    case kDropped: {
      auto it = r.stats.find("events_dropped");
      return static_cast<qlonglong>(it == r.stats.end() ? 0 : it->second);
    }
    default:
      return {};
  }
}

QVariant RunSummaryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const kNames[kColumnCount] = {
      "Run", "Rank", "GPU", "Events", "Kernels", "GEMMs", "Collectives", "Span (ms)", "Dropped"};
  return section >= 0 && section < kColumnCount ? QString(kNames[section]) : QVariant();
}

}  // namespace detrace::gui
