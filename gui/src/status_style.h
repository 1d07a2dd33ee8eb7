// How each pair status looks everywhere in the viewer (tables, timeline, strips, reports).
#pragma once

#include <QColor>
#include <QString>

#include "detrace/replay/diff.h"

namespace detrace::gui {

// Background for a row or span of this status; invalid (no colour) for identical.
QColor statusColor(replay::PairStatus status);
// A stronger variant for marks on the timeline and legends.
QColor statusMarkColor(replay::PairStatus status);
QString statusName(replay::PairStatus status);
inline constexpr int kStatusCount = 6;  // PairStatus values 0 .. 5

}  // namespace detrace::gui
