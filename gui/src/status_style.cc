#include "status_style.h"

namespace detrace::gui {

QColor statusColor(replay::PairStatus status) {
  switch (status) {
    case replay::PairStatus::kIdentical:
      return {};
    case replay::PairStatus::kKernelSelection:
      return QColor(255, 224, 160);
    case replay::PairStatus::kNondeterministic:
      return QColor(255, 176, 176);
    case replay::PairStatus::kPropagated:
      return QColor(226, 212, 246);
    case replay::PairStatus::kSchedule:
      return QColor(200, 220, 245);
    case replay::PairStatus::kBatchVariant:
      return QColor(255, 190, 140);
    case replay::PairStatus::kReordered: return QColor(226, 238, 226);  // not a divergence
  }
  return {};
}

QColor statusMarkColor(replay::PairStatus status) {
  switch (status) {
    case replay::PairStatus::kIdentical:
      return QColor(120, 170, 120);
    case replay::PairStatus::kKernelSelection:
      return QColor(230, 150, 0);
    case replay::PairStatus::kNondeterministic:
      return QColor(210, 30, 30);
    case replay::PairStatus::kPropagated:
      return QColor(140, 90, 200);
    case replay::PairStatus::kSchedule:
      return QColor(40, 110, 200);
    case replay::PairStatus::kBatchVariant:
      return QColor(235, 90, 0);
    case replay::PairStatus::kReordered: return QColor(150, 175, 150);  // not a divergence
  }
  return Qt::black;
}

QString statusName(replay::PairStatus status) {
  return QString::fromUtf8(replay::pairStatusName(status));
}

}  // namespace detrace::gui
