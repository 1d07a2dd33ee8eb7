// EventSource: event rows for the tables, read from the traces in blocks by one worker thread that
// owns its SQLite connections (one per run side and rank). The UI asks for a block and gets it
// back through a queued call as a value snapshot; answers for an older session are dropped.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <QThread>
#include <memory>
#include <vector>

#include "detrace/db/records.h"

namespace detrace::gui {

// One event as the tables show it.
struct EventRow {
  int64_t seq = -1;
  db::EventKind kind = db::EventKind::kOther;
  QString name;       // short: kernel without parameters, or the library call
  QString full_name;  // the recorded name
  QString detail;     // GEMM shape and algorithm, collective op/count/algorithm, launch config
  int64_t stream = -1;
  int64_t cpu_ns = -1, gpu_start_ns = -1, gpu_end_ns = -1;
  int64_t parent = -1;
};
using EventBlock = std::shared_ptr<const std::vector<EventRow>>;

class EventSource : public QObject {
  Q_OBJECT

 public:
  static constexpr int64_t kBlock = 256;  // events per block

  explicit EventSource(QObject* parent = nullptr);
  ~EventSource() override;

  // Forgets every open reader and serves `paths` (side 0 = run A, side 1 = run B) from now on.
  void open(int session, const QStringList& paths);
  // Asks for events [block * kBlock, (block + 1) * kBlock) of `side`, `rank`.
  void request(int session, int side, int32_t rank, int64_t block);
  // Asks for run A's first rank and both sides' event counts on it (cheap: no scan).
  void requestCounts(int session);

 signals:
  // events_b is -1 without a run B (or without that rank in it).
  void countsReady(int session, int rank, qint64 events_a, qint64 events_b);
  void blockReady(int session, int side, int rank, qint64 block, detrace::gui::EventBlock rows);
  void failed(int session, QString error);

 private:
  struct State;
  QThread thread_;
  QObject* worker_ = nullptr;     // lives in thread_; tasks run in its context
  std::shared_ptr<State> state_;  // touched only on thread_
};

}  // namespace detrace::gui
