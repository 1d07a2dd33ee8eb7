// Loads runs off the UI thread. Each load() gets an id; a result whose id is not the latest is
// dropped (the user opened something else meanwhile). Results arrive as value snapshots through a
// queued signal; the UI thread never touches SQLite.
#pragma once

#include <QObject>
#include <QStringList>
#include <vector>

#include "detrace/replay/summary.h"

namespace detrace::gui {

class RunLoader : public QObject {
  Q_OBJECT

 public:
  using QObject::QObject;
  // Starts loading `paths` in a worker thread; returns the job id.
  int load(const QStringList& paths);

 signals:
  void loaded(int job, std::vector<detrace::replay::RunSummary> runs, QStringList errors);

 private:
  int latest_ = 0;
};

}  // namespace detrace::gui
