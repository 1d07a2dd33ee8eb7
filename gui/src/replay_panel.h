// The Replay tab: pick an event (the selected pair by default) and implementations, run the replay
// in the background with progress, see the results table and the report. Cancel stops waiting:
// the replay library cannot be interrupted, so a running replay finishes in the background and its
// result is discarded.
#pragma once

#include <QWidget>
#include <memory>

#include "replay_backend.h"
#include "replay_results_model.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace detrace::gui {

class ReplayPanel : public QWidget {
  Q_OBJECT

 public:
  explicit ReplayPanel(QWidget* parent = nullptr);
  void setBackend(std::shared_ptr<ReplayBackend> backend);  // null: nothing to replay
  // Fills the event fields (the pair selected elsewhere); batch: offer the pair replay first.
  void setEvent(int32_t rank, int64_t seq_a, int64_t seq_b, bool batch);
  void start();
  void cancel();

  ReplayResultsModel* model() { return &model_; }
  QString statusText() const;
  bool running() const { return running_; }

 signals:
  void finished(bool ok);

 private:
  ReplayRequest request() const;
  void onProgress(int job, int done, int total, const QString& what);
  void onDone(int job, const ReplayOutcome& outcome);
  void setRunning(bool running);

  std::shared_ptr<ReplayBackend> backend_;
  ReplayResultsModel model_;
  QComboBox* target_ = nullptr;
  QSpinBox* rank_ = nullptr;
  QSpinBox* seq_a_ = nullptr;
  QSpinBox* seq_b_ = nullptr;
  QLineEdit* impls_ = nullptr;
  QSpinBox* repeat_ = nullptr;
  QCheckBox* cpu_only_ = nullptr;
  QPushButton* run_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QPlainTextEdit* report_ = nullptr;
  int job_ = 0;
  bool running_ = false;
};

}  // namespace detrace::gui
