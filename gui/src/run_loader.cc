#include "run_loader.h"

#include <QPointer>

#include <QtConcurrent/QtConcurrent>

#include "detrace/db/run.h"

namespace detrace::gui {

int RunLoader::load(const QStringList& paths) {
  int job = ++latest_;
  QPointer<RunLoader> self(this);
  (void)QtConcurrent::run([self, job, paths] {
    std::vector<replay::RunSummary> runs;
    QStringList errors;
    for (const QString& p : paths) {
      auto run = db::Run::open(p.toStdString());
      auto summary =
          run.isOk() ? replay::summarize(*run) : Result<replay::RunSummary>(run.status());
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
