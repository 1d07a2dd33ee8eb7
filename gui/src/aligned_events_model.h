// The aligned events of one rank: run A beside run B, one row per aligned pair, coloured by
// status. Thin and windowed: rows come from the analysis snapshot (AlignedRows: row -> seqs), the
// columns of each event from EventSource blocks fetched when a row is first shown and cached.
// Until the analysis arrives, rows pair events by position and their status is "analysing".
#pragma once

#include <QAbstractTableModel>
#include <QJsonObject>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "analysis.h"
#include "event_source.h"

namespace detrace::gui {

class AlignedEventsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kStatus,
    kSeqA,
    kKindA,
    kNameA,
    kDetailA,
    kDurA,
    kSeqB,
    kKindB,
    kNameB,
    kDetailB,
    kDurB,
    kColumnCount
  };
  static constexpr int kStatusRole = Qt::UserRole + 1;  // int PairStatus, -1 while analysing

  explicit AlignedEventsModel(EventSource* source, QObject* parent = nullptr);

  // Pairs events by position (before the analysis): `events_b` < 0 if there is no run B.
  void setPositional(int session, int32_t rank, int64_t events_a, int64_t events_b);
  // Pairs events as aligned by the analysis.
  void setAligned(int session, std::shared_ptr<const RankView> view);
  // Shows only these aligned rows (ascending); null shows every row.
  void setFilter(std::shared_ptr<const std::vector<int64_t>> rows);

  int32_t rank() const { return rank_; }
  bool aligned() const { return view_ != nullptr; }
  const std::shared_ptr<const RankView>& view() const { return view_; }
  // View row <-> aligned row (the same without a filter); viewRowAtOrAfter: the first view row
  // whose aligned row is >= `aligned_row`, rowCount() if none.
  int64_t alignedRow(int view_row) const;
  int viewRowAtOrAfter(int64_t aligned_row) const;
  replay::AlignedRow pairAt(int view_row) const;
  // The cached row of event `seq` on `side`, or null (and it is fetched).
  const EventRow* event(int side, int64_t seq) const;
  QJsonObject rowJson(int view_row) const;
  QString rowText(int view_row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 signals:
  // Every side's first block arrived since the last reset: the first screen can be drawn.
  void firstRowsReady();

 private:
  void onBlock(int session, int side, int rank, qint64 block, EventBlock rows);
  void resetCache();
  void fetch(int side, int64_t block) const;
  QVariant eventData(int side, int64_t seq, int column, int role) const;
  QVariant statusData(const replay::AlignedRow& pair, int role) const;
  int sideCount() const { return events_b_ >= 0 ? 2 : 1; }
  void emitChanged(int side, int64_t first_seq, int64_t last_seq);

  EventSource* source_;
  int session_ = 0;
  int32_t rank_ = 0;
  int64_t events_a_ = 0, events_b_ = -1;
  std::shared_ptr<const RankView> view_;
  std::shared_ptr<const std::vector<int64_t>> filter_;
  std::map<int64_t, EventBlock> cache_[2];
  mutable std::set<int64_t> pending_[2];
  bool first_rows_sent_ = false;
};

}  // namespace detrace::gui
