#include "groups_model.h"

#include "status_style.h"

namespace detrace::gui {
namespace {

// Where a class parts from the largest: "rank 0, event 104 in B: schedule or shape difference".
QString partsAt(const replay::RunDiff& d) {
  if (d.identical() && !d.complete()) return "matches where compared, but not every rank is in both runs";
  if (d.identical()) return "bit-identical";
  for (const replay::RankDiff& r : d.ranks) {
    if (r.rank != *d.origin_rank || !r.first) continue;
    return QString("parts from class 1 on rank %1 at event %2 in A / %3 in B: %4")
        .arg(r.rank)
        .arg(r.first->a >= 0 ? QString::number(r.first->a) : "—")
        .arg(r.first->b >= 0 ? QString::number(r.first->b) : "—")
        .arg(statusName(r.first->status));
  }
  return "differs";
}

}  // namespace

void GroupsModel::setAnalysis(std::shared_ptr<const Analysis> a) {
  beginResetModel();
  rows_.clear();
  runs_ = a ? static_cast<int>(a->paths.size()) : 0;
  if (a && a->groups) {
    for (size_t k = 0; k < a->groups->classes.size(); ++k) {
      Row row;
      for (size_t i : a->groups->classes[k]) row.runs << runLabel(a->paths[static_cast<int>(i)]);
      row.verdict = k == 0 ? QString("the largest class") : partsAt(a->groups->explanations[k - 1]);
      rows_.push_back(row);
    }
  } else if (a) {  // two runs: one class if identical, else two
    if (a->diff.identical() && a->diff.complete()) {
      rows_.push_back({{a->label_a, a->label_b}, "the largest class"});
    } else {
      rows_.push_back({{a->label_a}, "the largest class"});
      rows_.push_back({{a->label_b}, partsAt(a->diff)});
    }
  }
  endResetModel();
}

QString GroupsModel::summary() const {
  return QString("%1 distinct behaviour(s) over %2 runs").arg(rows_.size()).arg(runs_);
}

int GroupsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int GroupsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant GroupsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || role != Qt::DisplayRole) return {};
  const Row& r = rows_[static_cast<size_t>(index.row())];
  switch (index.column()) {
    case kClass:
      return index.row() + 1;
    case kRuns:
      return r.runs.join(", ");
    case kCount:
      return static_cast<int>(r.runs.size());
    case kVerdict:
      return r.verdict;
    default:
      return {};
  }
}

QVariant GroupsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const kNames[kColumnCount] = {"Class", "Runs (bit-identical)", "Runs",
                                                   "Against class 1"};
  return section >= 0 && section < kColumnCount ? QString(kNames[section]) : QVariant();
}

}  // namespace detrace::gui
