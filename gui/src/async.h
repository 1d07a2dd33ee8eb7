// runAsync: the one way the viewer runs work off the UI thread. `work` runs on Qt's thread pool;
// its result (a value) is handed to `done` on `receiver`'s thread through a queued call, and
// dropped if `receiver` is gone. Callers drop stale results themselves by job id. A `work` that
// throws still hands `done` a result (AsyncFailure's: an error, or null), so that no
// view waits for good on work that died on the pool, where Qt would swallow the exception.
#pragma once

#include <QMetaObject>
#include <QObject>
#include <QPointer>

#include <exception>
#include <memory>
#include <string>
#include <type_traits>

#include <QtConcurrent/QtConcurrent>

#include "detrace/base/status.h"

namespace detrace::gui {

// What a failed `work` of result type R gives `done`.
template <typename R>
struct AsyncFailure {
  static R make(const std::string&) { return R{}; }
};
template <typename T>
struct AsyncFailure<Result<T>> {
  static Result<T> make(const std::string& what) {
    return makeError(ErrorCode::kInternal, "internal error: {}", what);
  }
};
template <>
struct AsyncFailure<Status> {
  static Status make(const std::string& what) {
    return makeError(ErrorCode::kInternal, "internal error: {}", what);
  }
};
// A shared result comes back null: `done` tells a failure from an empty result.
template <typename T>
struct AsyncFailure<std::shared_ptr<const T>> {
  static std::shared_ptr<const T> make(const std::string&) { return nullptr; }
};

// Runs `work`, turning an exception into AsyncFailure's result.
template <typename Work>
auto runCaught(Work& work) -> std::invoke_result_t<Work&> {
  using R = std::invoke_result_t<Work&>;
  try {
    return work();
  } catch (const std::exception& e) {
    return AsyncFailure<R>::make(e.what());
  } catch (...) {
    return AsyncFailure<R>::make("unknown exception");
  }
}

template <typename Work, typename Done>
void runAsync(QObject* receiver, Work work, Done done) {
  QPointer<QObject> guard(receiver);
  (void)QtConcurrent::run([guard, work, done]() mutable {
    auto result = runCaught(work);
    QMetaObject::invokeMethod(
        guard.data(),
        [guard, done, result] {
          if (guard) done(result);
        },
        Qt::QueuedConnection);
  });
}

}  // namespace detrace::gui
