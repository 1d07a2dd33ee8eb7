#include "analysis_loader.h"

#include <QPointer>

#include <QtConcurrent/QtConcurrent>

#include "async.h"

namespace detrace::gui {

int AnalysisLoader::start(const QStringList& paths) {
  const int job = ++latest_;
  QPointer<AnalysisLoader> self(this);
  auto report = [self, job](const QString& what) {
    QMetaObject::invokeMethod(
        self.data(),
        [self, job, what] {
          if (self && job == self->latest_) emit self->progress(job, what);
        },
        Qt::QueuedConnection);
  };
  (void)QtConcurrent::run([self, job, paths, report] {
    // analyse() returns its errors; anything it throws is turned into one too (a worker's
    // exception would otherwise be swallowed by the pool and `finished` never come).
    auto work = [&] { return analyse(paths, report); };
    auto result = runCaught(work);
    std::shared_ptr<const Analysis> analysis = result.isOk() ? *result : nullptr;
    QString error = result.isOk() ? QString() : QString::fromStdString(result.status().message());
    QMetaObject::invokeMethod(
        self.data(),
        [self, job, analysis, error] {
          if (self && job == self->latest_) emit self->finished(job, analysis, error);
        },
        Qt::QueuedConnection);
  });
  return job;
}

}  // namespace detrace::gui
