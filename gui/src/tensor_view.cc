#include "tensor_view.h"

#include <QChart>
#include <QChartView>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "async.h"

namespace detrace::gui {

TensorView::TensorView(QWidget* parent) : QWidget(parent) {
  title_ = new QLabel("Select an event in the aligned events to compare its operands.", this);
  title_->setWordWrap(true);
  table_ = new QTableView(this);
  table_->setModel(&model_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->hide();
  strip_ = new RowStripWidget(this);
  heatmap_ = new HeatmapWidget(this);
  chart_ = new QChartView(this);
  chart_->setRenderHint(QPainter::Antialiasing);
  chart_->setMinimumHeight(220);
  auto* plots = new QSplitter(Qt::Horizontal, this);
  plots->addWidget(heatmap_);
  plots->addWidget(chart_);
  plots->setStretchFactor(0, 3);
  plots->setStretchFactor(1, 2);
  plots->setSizes({800, 600});
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(title_);
  layout->addWidget(table_, 2);
  layout->addWidget(strip_);
  layout->addWidget(plots, 3);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& i) { selectOperand(i.row()); });
  clear();
}

void TensorView::setRuns(const db::Run& a, const db::Run& b, bool by_content) {
  run_a_ = std::make_unique<db::Run>(a);
  run_b_ = std::make_unique<db::Run>(b);
  by_content_ = by_content;
}

void TensorView::clear() {
  ++job_;
  model_.setPair(nullptr);
  current_ = -1;
  strip_->setRows({}, {});
  heatmap_->setDiff(nullptr, "Select an operand.");
  replaceChart(new QChart);
}

void TensorView::showNone(const QString& why) {
  clear();
  title_->setText(why);
  // Queued: whoever waits for loaded() learns of this pair's view after the call that chose it
  // returns, as for a pair loaded in the background.
  const int job = job_;
  QMetaObject::invokeMethod(
      this, [this, job] { if (job == job_) emit loaded(); }, Qt::QueuedConnection);
}

void TensorView::showPair(int32_t rank, int64_t seq_a, int64_t seq_b) {
  if (!run_a_ || !run_b_) return;
  const int job = ++job_;
  title_->setText(
      QString("Loading the operands of event %1 in A / %2 in B…").arg(seq_a).arg(seq_b));
  auto a = *run_a_, b = *run_b_;
  bool by_content = by_content_;
  runAsync(
      this,
      [a, b, rank, seq_a, seq_b, by_content] {
        return loadTensorPair(a, b, rank, seq_a, seq_b, by_content);
      },
      [this, job](Result<std::shared_ptr<const TensorPair>> result) {
        if (job != job_) return;  // another pair was selected meanwhile
        if (!result.isOk()) {
          title_->setText(QString::fromStdString(result.status().message()));
          emit loaded();  // done, the title says why it shows nothing
          return;
        }
        onLoaded(*result);
      });
}

void TensorView::onLoaded(std::shared_ptr<const TensorPair> pair) {
  model_.setPair(pair);
  QString seqs = QString("rank %1 · event %2 in A / %3 in B")
                     .arg(pair->rank)
                     .arg(pair->seq_a)
                     .arg(pair->seq_b);
  title_->setText(
      pair->operands.empty()
          ? seqs +
                ": this event has no recorded operands (only GEMMs and collectives are "
                "fingerprinted)"
          : seqs + QString(": %1 operand(s)%2")
                       .arg(pair->operands.size())
                       .arg(pair->by_content
                                ? " · batch-size mode: A's rows are looked up by content in B"
                                : ""));
  int pick = pair->operands.empty() ? -1 : 0;
  for (size_t i = 0; i < pair->operands.size(); ++i) {
    if (operandDiffers(pair->operands[i], pair->by_content)) {
      pick = static_cast<int>(i);
      break;
    }
  }
  if (pick >= 0) table_->selectRow(pick);
  selectOperand(pick);
  emit loaded();
}

void TensorView::selectOperand(int row) {
  current_ = row;
  const OperandPair* o = model_.operand(row);
  if (o == nullptr) {
    strip_->setRows({}, {});
    heatmap_->setDiff(nullptr, "Select an operand.");
    replaceChart(new QChart);
    return;
  }
  strip_->setRows(o->rows, QString("operand %1 (%2), per-row fingerprints: %3 of %4 rows differ "
                                   "(green equal, red differ, grey missing)")
                               .arg(o->name, QString(db::operandRoleName(o->role)))
                               .arg(o->rows_differing)
                               .arg(o->rows.size()));
  heatmap_->setDiff(o->ulp ? &*o->ulp : nullptr, o->capture_note);
  QChart* chart = o->ulp ? makeHistogramChart(o->histogram) : new QChart;
  if (!o->ulp) chart->setTitle("No captured bytes: no ULP histogram");
  replaceChart(chart);
}

void TensorView::replaceChart(QChart* chart) {
  QChart* old = chart_->chart();
  chart_->setChart(chart);  // the view owns the new chart and releases (does not delete) the old
  delete old;
}

}  // namespace detrace::gui
