// Runs analyse() off the UI thread. Each start() gets an id; only the latest job's progress and
// result reach the UI (hotspot's job-tracker pattern), so opening other runs meanwhile, or
// cancel(), simply makes a running job's result stale.
#pragma once

#include <QObject>
#include <QStringList>
#include <memory>

#include "analysis.h"

namespace detrace::gui {

class AnalysisLoader : public QObject {
  Q_OBJECT

 public:
  using QObject::QObject;
  int start(const QStringList& paths);
  void cancel() { ++latest_; }
  int latest() const { return latest_; }

 signals:
  void progress(int job, QString what);
  // `analysis` is null on failure, with `error` saying why.
  void finished(int job, std::shared_ptr<const detrace::gui::Analysis> analysis, QString error);

 private:
  int latest_ = 0;
};

}  // namespace detrace::gui
