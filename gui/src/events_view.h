// The aligned events tab: one rank's pairs in a table, with filters (kind, name, status), search,
// next/previous divergence (F8 / Shift+F8), find (Ctrl+F, F3 / Shift+F3) and copy (Ctrl+C: the row
// as text, Ctrl+Shift+C: as JSON). Filtering and search run off the UI thread.
#pragma once

#include <QWidget>
#include <map>
#include <memory>

#include "aligned_events_model.h"
#include "analysis.h"
#include "event_filter.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QTableView;

namespace detrace::gui {

class EventsView : public QWidget {
  Q_OBJECT

 public:
  explicit EventsView(EventSource* source, QWidget* parent = nullptr);

  AlignedEventsModel* model() { return model_; }
  QTableView* table() { return table_; }
  void setPositional(int session, int32_t rank, int64_t events_a, int64_t events_b);
  void setAnalysis(int session, std::shared_ptr<const Analysis> analysis);
  void showRank(int32_t rank);

  // Selects and scrolls to an aligned row / an event; false if it is filtered out or absent.
  bool jumpToAlignedRow(int64_t row);
  bool jumpToEvent(int side, int64_t seq);
  bool jumpToFirstDivergence();
  bool nextDivergence();
  bool previousDivergence();
  void setFilter(const EventFilter& filter);     // applied asynchronously: filterApplied()
  void find(const QString& text, bool forward);  // asynchronously: searchDone(found)
  void copyRow();
  void copyJson();
  // The pair at the current row (a = b = -1 if none).
  replay::AlignedRow currentPair() const;

 signals:
  void currentPairChanged(int32_t rank, detrace::replay::AlignedRow pair);
  void filterApplied();
  void searchDone(bool found);

 private:
  QWidget* makeToolbar();
  void addShortcuts();
  void applyFilterFromControls();
  int64_t currentAlignedRow() const;
  bool jumpAmong(const std::vector<int64_t>& rows, bool forward);
  void updateInfo();

  AlignedEventsModel* model_;
  QTableView* table_ = nullptr;
  QComboBox* rank_box_ = nullptr;
  QComboBox* kind_box_ = nullptr;
  QComboBox* status_box_ = nullptr;
  QLineEdit* name_edit_ = nullptr;
  QLineEdit* search_edit_ = nullptr;
  QLabel* info_ = nullptr;
  int session_ = 0;
  std::shared_ptr<const Analysis> analysis_;
  int filter_job_ = 0, search_job_ = 0;
  std::map<QString, std::shared_ptr<const std::vector<int64_t>>> search_cache_;
};

}  // namespace detrace::gui
