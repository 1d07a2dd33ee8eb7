#include "replay_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFontDatabase>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>
#include <limits>

#include <QtConcurrent/QtConcurrent>

#include "async.h"

namespace detrace::gui {

// A replay that threw ran nothing: its outcome carries the error (ReplayPanel::start).
template <>
struct AsyncFailure<ReplayOutcome> {
  static ReplayOutcome make(const std::string& what) {
    ReplayOutcome out;
    out.error = QString("internal error: %1").arg(QString::fromStdString(what));
    return out;
  }
};

namespace {

QSpinBox* seqBox(QWidget* parent) {
  auto* box = new QSpinBox(parent);
  box->setRange(-1, std::numeric_limits<int>::max());
  box->setSpecialValueText("—");
  return box;
}

}  // namespace

ReplayPanel::ReplayPanel(QWidget* parent) : QWidget(parent) {
  target_ = new QComboBox(this);
  target_->addItem("the event in run A", static_cast<int>(ReplayRequest::Target::kEventA));
  target_->addItem("the event in run B", static_cast<int>(ReplayRequest::Target::kEventB));
  target_->addItem("the pair at two batch sizes (A vs B)",
                   static_cast<int>(ReplayRequest::Target::kPair));
  rank_ = new QSpinBox(this);
  rank_->setRange(0, 1 << 20);
  seq_a_ = seqBox(this);
  seq_b_ = seqBox(this);
  impls_ = new QLineEdit(this);
  impls_->setPlaceholderText(
      "every implementation; or e.g. recorded, cublaslt-pinned, cpu-fp32, fp64, ring0/cpu");
  repeat_ = new QSpinBox(this);
  repeat_->setRange(1, 1000);
  repeat_->setValue(3);
  cpu_only_ = new QCheckBox("CPU implementations only", this);
  auto* form = new QFormLayout;
  form->addRow("Replay", target_);
  auto* where = new QHBoxLayout;
  const std::pair<const char*, QWidget*> fields[] = {
      {"rank", rank_}, {"event in A", seq_a_}, {"event in B", seq_b_}};
  for (auto [label, w] : fields) {
    where->addWidget(new QLabel(label, this));
    where->addWidget(w);
  }
  where->addStretch();
  form->addRow("Event", where);
  form->addRow("Implementations", impls_);
  auto* opts = new QHBoxLayout;
  opts->addWidget(new QLabel("runs of each", this));
  opts->addWidget(repeat_);
  opts->addWidget(cpu_only_);
  opts->addStretch();
  form->addRow("Options", opts);
  run_ = new QPushButton("Run replay", this);
  cancel_ = new QPushButton("Cancel", this);
  progress_ = new QProgressBar(this);
  status_ = new QLabel(this);
  status_->setWordWrap(true);
  connect(run_, &QPushButton::clicked, this, &ReplayPanel::start);
  connect(cancel_, &QPushButton::clicked, this, &ReplayPanel::cancel);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_);
  buttons->addWidget(cancel_);
  buttons->addWidget(progress_, 1);
  auto* table = new QTableView(this);
  table->setModel(&model_);
  table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table->horizontalHeader()->setStretchLastSection(true);
  table->verticalHeader()->hide();
  report_ = new QPlainTextEdit(this);
  report_->setReadOnly(true);
  report_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  report_->setLineWrapMode(QPlainTextEdit::NoWrap);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addLayout(buttons);
  layout->addWidget(status_);
  layout->addWidget(table, 2);
  layout->addWidget(report_, 1);
  setBackend(nullptr);
}

void ReplayPanel::setBackend(std::shared_ptr<ReplayBackend> backend) {
  ++job_;
  backend_ = std::move(backend);
  setRunning(false);
  model_.setRows({});
  report_->clear();
  QString why;
  bool ok = backend_ && backend_->available(&why);
  run_->setEnabled(ok);
  status_->setText(
      !backend_ ? "Open two runs to replay their ops."
      : ok      ? "Replay re-executes a recorded GEMM or collective on its captured operands "
                  "(record with --capture full) with the recorded kernel and deterministic alternatives."
                : "Replay is not available: " + why);
}

void ReplayPanel::setEvent(int32_t rank, int64_t seq_a, int64_t seq_b, bool batch) {
  rank_->setValue(rank);
  seq_a_->setValue(static_cast<int>(seq_a));
  seq_b_->setValue(static_cast<int>(seq_b));
  if (batch && seq_a >= 0 && seq_b >= 0)
    target_->setCurrentIndex(2);
  else if (seq_a < 0 && target_->currentIndex() != 1)
    target_->setCurrentIndex(1);
}

ReplayRequest ReplayPanel::request() const {
  ReplayRequest q;
  q.target = static_cast<ReplayRequest::Target>(target_->currentData().toInt());
  q.rank = rank_->value();
  q.seq_a = seq_a_->value();
  q.seq_b = seq_b_->value();
  for (const QString& s : impls_->text().split(',', Qt::SkipEmptyParts)) q.impls << s.trimmed();
  q.repeat = repeat_->value();
  q.allow_gpu = !cpu_only_->isChecked();
  return q;
}

void ReplayPanel::setRunning(bool running) {
  running_ = running;
  cancel_->setEnabled(running);
  run_->setEnabled(!running && backend_ && backend_->available(nullptr));
  progress_->setVisible(running);
  if (running) progress_->setRange(0, 0);
}

void ReplayPanel::start() {
  if (!backend_ || running_) return;
  const int job = ++job_;
  setRunning(true);
  status_->setText("Replaying…");
  QPointer<ReplayPanel> self(this);
  auto backend = backend_;
  ReplayRequest q = request();
  (void)QtConcurrent::run([self, backend, q, job] {
    auto work = [&] {
      return backend->run(q, [self, job](int done, int total, const QString& what) {
        QMetaObject::invokeMethod(
            self.data(),
            [self, job, done, total, what] {
              if (self) self->onProgress(job, done, total, what);
            },
            Qt::QueuedConnection);
      });
    };
    ReplayOutcome outcome = runCaught(work);
    QMetaObject::invokeMethod(
        self.data(),
        [self, job, outcome] {
          if (self) self->onDone(job, outcome);
        },
        Qt::QueuedConnection);
  });
}

void ReplayPanel::cancel() {
  if (!running_) return;
  ++job_;  // the running replay's progress and result are now stale
  setRunning(false);
  status_->setText(
      "Cancelled (the replay already running finishes in the background; its result is "
      "discarded).");
  emit finished(false);
}

void ReplayPanel::onProgress(int job, int done, int total, const QString& what) {
  if (job != job_) return;
  progress_->setRange(0, std::max(total, 1));
  progress_->setValue(done);
  status_->setText(QString("Replaying: %1 (%2 of %3 done)").arg(what).arg(done).arg(total));
}

void ReplayPanel::onDone(int job, const ReplayOutcome& outcome) {
  if (job != job_) return;
  setRunning(false);
  model_.setRows(outcome.rows);
  report_->setPlainText(outcome.report);
  status_->setText(outcome.error.isEmpty() ? "Replayed: " + outcome.title
                                           : "Replay failed: " + outcome.error);
  emit finished(outcome.error.isEmpty());
}

QString ReplayPanel::statusText() const { return status_->text(); }

}  // namespace detrace::gui
