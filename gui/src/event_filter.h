// Filtering and searching the aligned rows of a rank by kind, name and status: pure functions over
// an analysis snapshot, run off the UI thread by the events view.
#pragma once

#include <QSet>
#include <QString>
#include <cstdint>
#include <vector>

#include "analysis.h"

namespace detrace::gui {

struct EventFilter {
  QSet<int> kinds;     // db::EventKind values; empty = every kind
  QString name;        // case-insensitive substring of either side's name; empty = any
  QSet<int> statuses;  // replay::PairStatus values; empty = every status
  bool active() const { return !kinds.isEmpty() || !name.isEmpty() || !statuses.isEmpty(); }
};

// The aligned rows (ascending) whose pair matches: either side of the kind and name, and the
// pair's status.
std::vector<int64_t> filterRows(const RankView& view, const EventFilter& filter);

}  // namespace detrace::gui
