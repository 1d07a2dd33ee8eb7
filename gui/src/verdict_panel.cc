#include "verdict_panel.h"

#include <QApplication>
#include <QClipboard>
#include <QFontDatabase>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTextDocument>
#include <QVBoxLayout>

#include "status_style.h"

namespace detrace::gui {
namespace {

QString seqText(int64_t seq) { return seq >= 0 ? QString::number(seq) : QString("—"); }

// "rank 0, event 41 in A / 42 in B, after 0 collective(s) · GEMM 6 of 40 · in step 3 › layer 5"
QString positionText(const replay::RankDiff& r) {
  const replay::PairDiff& f = *r.first;
  QString text = QString("rank %1, event %2 in A / %3 in B, after %4 collective(s)")
                     .arg(r.rank)
                     .arg(seqText(f.a), seqText(f.b))
                     .arg(f.collectives_before);
  if (!r.landmark.empty()) text += " · " + QString::fromStdString(r.landmark);
  auto path = [](const std::vector<std::string>& ranges) {
    QStringList parts;
    for (const std::string& p : ranges) parts << QString::fromStdString(p);
    return parts.join(" › ");
  };
  if (!r.position.empty()) text += " · in " + path(r.position);
  if (!r.position_b.empty()) text += " (in B: " + path(r.position_b) + ")";
  return text;
}

QString rankTable(const Analysis& a) {
  QString html =
      "<table cellspacing='0' cellpadding='3' border='1' style='border-collapse:collapse'>"
      "<tr><th>rank</th><th>events A</th><th>events B</th><th>first at A / B</th>"
      "<th>status</th><th>differing</th><th>by status</th></tr>";
  for (const replay::RankDiff& r : a.diff.ranks) {
    QString counts;
    for (auto [status, n] : r.counts) {
      if (status != replay::PairStatus::kIdentical)
        counts += QString("%1: %2 ").arg(statusName(status)).arg(n);
    }
    html += QString(
                "<tr><td>%1</td><td>%2</td><td>%3</td><td>%4 / "
                "%5</td><td>%6</td><td>%7</td><td>%8</td></tr>")
                .arg(r.rank)
                .arg(r.events_a)
                .arg(r.events_b)
                .arg(r.first ? seqText(r.first->a) : "—", r.first ? seqText(r.first->b) : "—",
                     r.first ? statusName(r.first->status) : "identical")
                .arg(r.differingEvents())
                .arg(counts.toHtmlEscaped());
  }
  return html + "</table>";
}

}  // namespace

VerdictPanel::VerdictPanel(QWidget* parent) : QWidget(parent) {
  headline_ = new QLabel(
      "Open two runs to compare them (File ▸ Open runs…, or drop run directories here).", this);
  headline_->setWordWrap(true);
  QFont big = headline_->font();
  big.setPointSizeF(big.pointSizeF() * 1.4);
  big.setBold(true);
  headline_->setFont(big);
  headline_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  mode_ = new QLabel(this);
  mode_->setWordWrap(true);
  fields_box_ = new QWidget(this);
  auto* form = new QFormLayout(fields_box_);
  form->setLabelAlignment(Qt::AlignRight | Qt::AlignTop);
  form->setRowWrapPolicy(QFormLayout::DontWrapRows);
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  static const std::pair<const char*, const char*> kFields[] = {{"position", "first divergence"},
                                                                {"op_a", "op in A"},
                                                                {"op_b", "op in B"},
                                                                {"status", "classification"},
                                                                {"why", "why"},
                                                                {"deep", "deep window"},
                                                                {"after", "after it"},
                                                                {"next", "next"}};
  for (auto [key, label] : kFields) {
    QLabel* value = addField(key, label);
    form->addRow(QString("<b>%1</b>").arg(label), value);
  }
  form_ = form;
  jump_ = new QPushButton("Jump to the first divergence", this);
  jump_->setToolTip("Show it in the aligned events (Ctrl+J)");
  jump_->setEnabled(false);
  copy_next_ = new QPushButton("Copy the next command", this);
  copy_next_->setEnabled(false);
  connect(jump_, &QPushButton::clicked, this, &VerdictPanel::jumpRequested);
  connect(copy_next_, &QPushButton::clicked, this,
          [this] { QApplication::clipboard()->setText(field("next")); });
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(jump_);
  buttons->addWidget(copy_next_);
  buttons->addStretch();
  ranks_ = new QLabel(this);
  ranks_->setTextFormat(Qt::RichText);
  warnings_ = new QLabel(this);
  warnings_->setWordWrap(true);
  warnings_->setStyleSheet("color: #a05000");
  report_ = new QPlainTextEdit(this);
  report_->setReadOnly(true);
  report_->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  report_->setLineWrapMode(QPlainTextEdit::WidgetWidth);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(headline_);
  layout->addWidget(mode_);
  layout->addWidget(fields_box_);
  layout->addLayout(buttons);
  layout->addWidget(ranks_);
  layout->addWidget(warnings_);
  layout->addWidget(new QLabel("<b>Report</b> (as <tt>detrace diff</tt> prints it)", this));
  layout->addWidget(report_, 1);
  clearFields();
}

QLabel* VerdictPanel::addField(const QString& key, const QString& label) {
  auto* value = new QLabel(this);
  value->setWordWrap(true);
  value->setTextFormat(key == "status" ? Qt::RichText : Qt::PlainText);  // kernel names hold '<'
  value->setTextInteractionFlags(Qt::TextSelectableByMouse);
  value->setObjectName(key);
  value->setAccessibleName(label);
  fields_[key] = value;
  return value;
}

void VerdictPanel::clearFields() {
  for (auto& [key, label] : fields_) label->clear();
  form_->setRowVisible(fields_["deep"], false);
  fields_box_->setVisible(false);
  jump_->setEnabled(false);
  copy_next_->setEnabled(false);
  ranks_->clear();
  warnings_->clear();
  mode_->clear();
}

void VerdictPanel::showProgress(const QString& what) {
  headline_->setStyleSheet("");
  headline_->setText(QString("Analysing… %1").arg(what));
}

void VerdictPanel::showError(const QString& error) {
  clearFields();
  headline_->setStyleSheet("color: #a00000");
  headline_->setText(error);
  report_->clear();
}

void VerdictPanel::setAnalysis(std::shared_ptr<const Analysis> a) {
  clearFields();
  report_->setPlainText(QString::fromStdString(a->report));
  ranks_->setText(rankTable(*a));
  QStringList warnings;
  for (const std::string& w : a->diff.warnings) warnings << QString::fromStdString("warning: " + w);
  warnings_->setText(warnings.join("\n"));
  if (a->diff.batch_mode) {
    mode_->setText(
        "Batch-size mode: the runs' token counts differ; the request's rows are compared.");
  }
  const replay::RankDiff* origin = a->originRank();
  if ((!origin || !origin->first) && !a->diff.complete()) {  // a rank is in one run only
    QStringList ranks;
    for (int32_t r : a->diff.uncompared_ranks) ranks << QString::number(r);
    headline_->setStyleSheet("color: #a05000");
    headline_->setText(QString("INCOMPLETE: %1 and %2 match on the %3 rank(s) compared, but rank(s) %4 are not "
                               "in both runs (see the warnings).")
                           .arg(a->label_a, a->label_b)
                           .arg(a->diff.ranks.size())
                           .arg(ranks.join(", ")));
    return;
  }
  if (!origin || !origin->first) {
    headline_->setStyleSheet("color: #106010");
    headline_->setText(QString("IDENTICAL: %1 and %2 match on every compared rank (%3 rank(s)).")
                           .arg(a->label_a, a->label_b)
                           .arg(a->diff.ranks.size()));
    return;
  }
  const replay::PairDiff& f = *origin->first;
  headline_->setStyleSheet("color: #a00000");
  headline_->setText(QString("DIVERGENT: %1 and %2 part on rank %3.")
                         .arg(a->label_a, a->label_b)
                         .arg(origin->rank));
  fields_["position"]->setText(positionText(*origin));
  fields_["op_a"]->setText(QString::fromStdString(origin->first_a));
  fields_["op_b"]->setText(QString::fromStdString(origin->first_b));
  fields_["status"]->setText(QString("<span style='background:%1'>&nbsp;%2&nbsp;</span>")
                                 .arg(statusColor(f.status).name(), statusName(f.status)));
  fields_["why"]->setText(QString::fromStdString(origin->why));
  if (origin->deep) {  // both runs were recorded with --deep: the kernel inside the stretch
    fields_["deep"]->setText(QString::fromStdString(replay::deepVerdictText(*origin->deep)));
    form_->setRowVisible(fields_["deep"], true);
  }
  fields_["after"]->setText(
      QString("%1 more differing event(s) on this rank").arg(origin->differingEvents() - 1));
  fields_["next"]->setText(QString::fromStdString(a->nextStep()));
  fields_box_->setVisible(true);
  jump_->setEnabled(true);
  copy_next_->setEnabled(true);
}

QString VerdictPanel::headline() const { return headline_->text(); }

QString VerdictPanel::field(const QString& name) const {
  auto it = fields_.find(name);
  if (it == fields_.end()) return {};
  QString text = it->second->text();
  if (it->second->textFormat() == Qt::RichText) {
    QTextDocument doc;
    doc.setHtml(text);
    return doc.toPlainText().trimmed();
  }
  return text;
}

QString VerdictPanel::reportText() const { return report_->toPlainText(); }

}  // namespace detrace::gui
