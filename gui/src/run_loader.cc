#include "run_loader.h"

#include <QPointer>

#include <QtConcurrent/QtConcurrent>

#include "async.h"
#include "detrace/db/run.h"

namespace detrace::gui {

int RunLoader::load(const QStringList& paths) {
  int job = ++latest_;
  QPointer<RunLoader> self(this);
  (void)QtConcurrent::run([self, job, paths] {
    std::vector<replay::RunSummary> runs;
    QStringList errors;
    for (const QString& p : paths) {
      auto load = [&p]() -> Result<replay::RunSummary> {
        auto run = db::Run::open(p.toStdString());
        return run.isOk() ? replay::summarize(*run) : Result<replay::RunSummary>(run.status());
      };
      auto summary = runCaught(load);  // an exception is an error of this run, not a lost job
      if (summary.isOk()) {
        runs.push_back(std::move(*summary));
      } else {
        errors << QString::fromStdString(summary.status().message());
      }
    }
    QMetaObject::invokeMethod(
        self.data(),
        [self, job, runs = std::move(runs), errors]() mutable {
          if (self && job == self->latest_) emit self->loaded(job, std::move(runs), errors);
        },
        Qt::QueuedConnection);
  });
  return job;
}

}  // namespace detrace::gui
