// runAsync: the one way the viewer runs work off the UI thread. `work` runs on Qt's thread pool;
// its result (a value) is handed to `done` on `receiver`'s thread through a queued call, and
// dropped if `receiver` is gone. Callers drop stale results themselves by job id.
#pragma once

#include <QMetaObject>
#include <QObject>
#include <QPointer>

#include <QtConcurrent/QtConcurrent>

namespace detrace::gui {

template <typename Work, typename Done>
void runAsync(QObject* receiver, Work work, Done done) {
  QPointer<QObject> guard(receiver);
  (void)QtConcurrent::run([guard, work, done] {
    auto result = work();
    QMetaObject::invokeMethod(
        guard.data(),
        [guard, done, result] {
          if (guard) done(result);
        },
        Qt::QueuedConnection);
  });
}

}  // namespace detrace::gui
