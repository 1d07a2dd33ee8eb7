#include "aligned_events_model.h"

#include <QBrush>
#include <algorithm>

#include "status_style.h"

namespace detrace::gui {
namespace {

constexpr size_t kMaxCachedBlocks = 512;  // per side: 128k events

QString durationText(const EventRow& e) {
  if (e.gpu_start_ns < 0 || e.gpu_end_ns < e.gpu_start_ns) return {};
  return QString::number(static_cast<double>(e.gpu_end_ns - e.gpu_start_ns) / 1000.0, 'f', 1);
}

QJsonObject eventJson(const EventRow& e) {
  return {{"seq", static_cast<qint64>(e.seq)},
          {"kind", db::eventKindName(e.kind)},
          {"name", e.full_name},
          {"detail", e.detail},
          {"stream", static_cast<qint64>(e.stream)},
          {"cpu_ns", static_cast<qint64>(e.cpu_ns)},
          {"gpu_start_ns", static_cast<qint64>(e.gpu_start_ns)},
          {"gpu_end_ns", static_cast<qint64>(e.gpu_end_ns)},
          {"parent_seq", static_cast<qint64>(e.parent)}};
}

}  // namespace

AlignedEventsModel::AlignedEventsModel(EventSource* source, QObject* parent)
    : QAbstractTableModel(parent), source_(source) {
  connect(source_, &EventSource::blockReady, this, &AlignedEventsModel::onBlock);
}

void AlignedEventsModel::resetCache() {
  for (int s = 0; s < 2; ++s) {
    cache_[s].clear();
    pending_[s].clear();
  }
  first_rows_sent_ = false;
}

void AlignedEventsModel::setPositional(int session, int32_t rank, int64_t events_a,
                                       int64_t events_b) {
  beginResetModel();
  session_ = session;
  rank_ = rank;
  events_a_ = events_a;
  events_b_ = events_b;
  view_.reset();
  filter_.reset();
  resetCache();
  endResetModel();
  for (int s = 0; s < sideCount(); ++s) fetch(s, 0);
}

void AlignedEventsModel::setAligned(int session, std::shared_ptr<const RankView> view) {
  beginResetModel();
  bool same = session == session_ && view && view->rank == rank_;
  session_ = session;
  rank_ = view ? view->rank : 0;
  view_ = std::move(view);
  events_a_ = view_ ? static_cast<int64_t>(view_->events[0].size()) : 0;
  events_b_ = view_ ? static_cast<int64_t>(view_->events[1].size()) : -1;
  filter_.reset();
  if (!same) resetCache();  // blocks are per (session, rank): keep them for the same rank
  endResetModel();
  for (int s = 0; s < sideCount(); ++s) fetch(s, 0);
}

void AlignedEventsModel::setFilter(std::shared_ptr<const std::vector<int64_t>> rows) {
  beginResetModel();
  filter_ = std::move(rows);
  endResetModel();
}

int64_t AlignedEventsModel::alignedRow(int view_row) const {
  if (filter_)
    return view_row >= 0 && view_row < static_cast<int>(filter_->size())
               ? (*filter_)[static_cast<size_t>(view_row)]
               : -1;
  return view_row;
}

int AlignedEventsModel::viewRowAtOrAfter(int64_t aligned_row) const {
  if (!filter_) return static_cast<int>(std::min<int64_t>(aligned_row, rowCount()));
  return static_cast<int>(std::lower_bound(filter_->begin(), filter_->end(), aligned_row) -
                          filter_->begin());
}

replay::AlignedRow AlignedEventsModel::pairAt(int view_row) const {
  int64_t row = alignedRow(view_row);
  if (row < 0) return {};
  if (view_) return view_->rows.at(row);
  return {row < events_a_ ? row : -1, row < events_b_ ? row : -1, replay::PairStatus::kIdentical};
}

void AlignedEventsModel::fetch(int side, int64_t block) const {
  if (pending_[side].count(block) || cache_[side].count(block)) return;
  pending_[side].insert(block);
  source_->request(session_, side, rank_, block);
}

const EventRow* AlignedEventsModel::event(int side, int64_t seq) const {
  if (seq < 0 || side >= sideCount()) return nullptr;
  int64_t block = seq / EventSource::kBlock;
  auto it = cache_[side].find(block);
  if (it == cache_[side].end()) {
    fetch(side, block);
    return nullptr;
  }
  size_t i = static_cast<size_t>(seq - block * EventSource::kBlock);
  return i < it->second->size() ? &(*it->second)[i] : nullptr;
}

void AlignedEventsModel::onBlock(int session, int side, int rank, qint64 block, EventBlock rows) {
  if (session != session_ || rank != rank_ || side >= sideCount()) return;  // stale
  pending_[side].erase(block);
  if (cache_[side].size() >= kMaxCachedBlocks)
    cache_[side].clear();  // the view re-fetches what it shows
  cache_[side][block] = rows;
  if (!rows->empty()) emitChanged(side, rows->front().seq, rows->back().seq);
  bool all = true;
  for (int s = 0; s < sideCount(); ++s) all &= cache_[s].count(0) > 0;
  if (all && !first_rows_sent_) {
    first_rows_sent_ = true;
    emit firstRowsReady();
  }
}

void AlignedEventsModel::emitChanged(int side, int64_t first_seq, int64_t last_seq) {
  int64_t r0 = first_seq, r1 = last_seq;
  if (view_) {
    r0 = side == 0 ? view_->rows.rowOfA(first_seq) : view_->rows.rowOfB(first_seq);
    r1 = side == 0 ? view_->rows.rowOfA(last_seq) : view_->rows.rowOfB(last_seq);
  }
  int v0 = viewRowAtOrAfter(r0), v1 = viewRowAtOrAfter(r1 + 1) - 1;
  v1 = std::min(v1, rowCount() - 1);
  if (v0 <= v1) emit dataChanged(index(v0, 0), index(v1, kColumnCount - 1));
}

int AlignedEventsModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid()) return 0;
  if (filter_) return static_cast<int>(filter_->size());
  if (view_) return static_cast<int>(view_->rows.size());
  return static_cast<int>(std::max(events_a_, events_b_));
}

int AlignedEventsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant AlignedEventsModel::statusData(const replay::AlignedRow& pair, int role) const {
  if (!view_) {
    if (role == Qt::DisplayRole) return QString("analysing…");
    if (role == kStatusRole) return -1;
    return {};
  }
  switch (role) {
    case Qt::DisplayRole:
      return statusName(pair.status);
    case kStatusRole:
      return static_cast<int>(pair.status);
    default:
      return {};
  }
}

QVariant AlignedEventsModel::eventData(int side, int64_t seq, int column, int role) const {
  if (seq < 0) return role == Qt::DisplayRole && column == kSeqA ? QVariant("—") : QVariant();
  if (column == kSeqA) {
    if (role == Qt::DisplayRole) return static_cast<qlonglong>(seq);
    if (role == Qt::TextAlignmentRole) return int(Qt::AlignRight | Qt::AlignVCenter);
    return {};
  }
  const EventRow* e = event(side, seq);
  if (e == nullptr) return role == Qt::DisplayRole && column == kNameA ? QVariant("…") : QVariant();
  switch (role) {
    case Qt::DisplayRole:
      if (column == kKindA) return QString(db::eventKindName(e->kind));
      if (column == kNameA) return e->name;
      if (column == kDetailA) return e->detail;
      if (column == kDurA) return durationText(*e);
      return {};
    case Qt::ToolTipRole:
      if (column == kNameA || column == kDetailA)
        return QString("%1\n%2").arg(e->full_name, e->detail);
      return {};
    case Qt::TextAlignmentRole:
      return column == kDurA ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant();
    default:
      return {};
  }
}

QVariant AlignedEventsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= kColumnCount) return {};
  const replay::AlignedRow pair = pairAt(index.row());
  if (role == Qt::BackgroundRole) {
    QColor c = view_ ? statusColor(pair.status) : QColor();
    return c.isValid() ? QVariant(QBrush(c)) : QVariant();
  }
  int column = index.column();
  if (column == kStatus) return statusData(pair, role);
  if (role == kStatusRole) return statusData(pair, role);
  if (column < kSeqB) return eventData(0, pair.a, column, role);
  return eventData(1, pair.b, column - kSeqB + kSeqA, role);
}

QVariant AlignedEventsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (orientation == Qt::Vertical) return section + 1;
  static const char* const kNames[kColumnCount] = {"Status",   "A seq",    "A kind", "A name",
                                                   "A detail", "A µs",     "B seq",  "B kind",
                                                   "B name",   "B detail", "B µs"};
  return section >= 0 && section < kColumnCount ? QString::fromUtf8(kNames[section]) : QVariant();
}

QJsonObject AlignedEventsModel::rowJson(int view_row) const {
  replay::AlignedRow pair = pairAt(view_row);
  QJsonObject out{{"rank", rank_}, {"row", static_cast<qint64>(alignedRow(view_row))}};
  out["status"] = view_ ? statusName(pair.status) : QString("analysing");
  const EventRow* a = event(0, pair.a);
  const EventRow* b = event(1, pair.b);
  out["a"] = a ? QJsonValue(eventJson(*a))
               : QJsonValue(pair.a >= 0 ? QJsonValue(static_cast<qint64>(pair.a)) : QJsonValue());
  out["b"] = b ? QJsonValue(eventJson(*b))
               : QJsonValue(pair.b >= 0 ? QJsonValue(static_cast<qint64>(pair.b)) : QJsonValue());
  return out;
}

QString AlignedEventsModel::rowText(int view_row) const {
  QStringList cells;
  for (int c = 0; c < kColumnCount; ++c)
    cells << data(index(view_row, c), Qt::DisplayRole).toString();
  return cells.join('\t');
}

}  // namespace detrace::gui
