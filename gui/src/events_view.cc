#include "events_view.h"

#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QShortcut>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>

#include "async.h"
#include "status_style.h"

namespace detrace::gui {
namespace {

QPushButton* button(const QString& text, const QString& tip, QWidget* parent) {
  auto* b = new QPushButton(text, parent);
  b->setToolTip(tip);
  b->setAutoDefault(false);
  return b;
}

}  // namespace

EventsView::EventsView(EventSource* source, QWidget* parent)
    : QWidget(parent), model_(new AlignedEventsModel(source, this)) {
  table_ = new QTableView(this);
  table_->setModel(model_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setWordWrap(false);  // long kernel names elide instead of wrapping to "void ..."
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
  table_->verticalHeader()->setSectionResizeMode(
      QHeaderView::Fixed);  // uniform rows: cheap scrolling
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  const int widths[AlignedEventsModel::kColumnCount] = {150, 50, 60,  270, 210, 45,
                                                        50,  60, 270, 210, 45};
  for (int c = 0; c < AlignedEventsModel::kColumnCount; ++c) table_->setColumnWidth(c, widths[c]);
  info_ = new QLabel(this);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(makeToolbar());
  layout->addWidget(table_, 1);
  layout->addWidget(info_);
  addShortcuts();
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this] {
    updateInfo();
    emit currentPairChanged(model_->rank(), currentPair());
  });
  connect(model_, &QAbstractItemModel::modelReset, this, &EventsView::updateInfo);
}

QWidget* EventsView::makeToolbar() {
  auto* bar = new QWidget(this);
  auto* row = new QHBoxLayout(bar);
  row->setContentsMargins(0, 0, 0, 0);
  rank_box_ = new QComboBox(bar);
  rank_box_->setToolTip("Rank shown");
  connect(rank_box_, &QComboBox::activated, this,
          [this](int i) { showRank(rank_box_->itemData(i).toInt()); });
  kind_box_ = new QComboBox(bar);
  kind_box_->addItem("all kinds", -1);
  for (db::EventKind k : db::kAllEventKinds)
    kind_box_->addItem(db::eventKindName(k), static_cast<int>(k));
  status_box_ = new QComboBox(bar);
  status_box_->addItem("all statuses", -1);
  status_box_->addItem("differing only", -2);
  for (int s = 1; s < kStatusCount; ++s)
    status_box_->addItem(statusName(static_cast<replay::PairStatus>(s)), s);
  name_edit_ = new QLineEdit(bar);
  name_edit_->setPlaceholderText("filter by name");
  name_edit_->setClearButtonEnabled(true);
  search_edit_ = new QLineEdit(bar);
  search_edit_->setPlaceholderText("find (Ctrl+F, F3)");
  search_edit_->setClearButtonEnabled(true);
  connect(kind_box_, &QComboBox::activated, this, &EventsView::applyFilterFromControls);
  connect(status_box_, &QComboBox::activated, this, &EventsView::applyFilterFromControls);
  connect(name_edit_, &QLineEdit::returnPressed, this, &EventsView::applyFilterFromControls);
  connect(search_edit_, &QLineEdit::returnPressed, this,
          [this] { find(search_edit_->text(), true); });
  auto* prev = button("◀ Prev divergence", "Previous differing pair (Shift+F8)", bar);
  auto* next = button("Next divergence ▶", "Next differing pair (F8)", bar);
  auto* copy = button("Copy row", "Copy the current row as text (Ctrl+C)", bar);
  auto* json = button("Copy JSON", "Copy the current row as JSON (Ctrl+Shift+C)", bar);
  connect(prev, &QPushButton::clicked, this, &EventsView::previousDivergence);
  connect(next, &QPushButton::clicked, this, &EventsView::nextDivergence);
  connect(copy, &QPushButton::clicked, this, &EventsView::copyRow);
  connect(json, &QPushButton::clicked, this, &EventsView::copyJson);
  for (QWidget* w :
       {static_cast<QWidget*>(new QLabel("Rank", bar)), static_cast<QWidget*>(rank_box_),
        static_cast<QWidget*>(kind_box_), static_cast<QWidget*>(status_box_)}) {
    row->addWidget(w);
  }
  row->addWidget(name_edit_, 1);
  row->addWidget(search_edit_, 1);
  for (QWidget* w : {prev, next, copy, json}) row->addWidget(w);
  return bar;
}

void EventsView::addShortcuts() {
  auto add = [this](const QKeySequence& key, auto slot) {
    auto* s = new QShortcut(key, this, slot);
    s->setContext(Qt::WidgetWithChildrenShortcut);
  };
  add(QKeySequence(Qt::Key_F8), [this] { nextDivergence(); });
  add(QKeySequence(Qt::SHIFT | Qt::Key_F8), [this] { previousDivergence(); });
  add(QKeySequence(Qt::Key_F3), [this] { find(search_edit_->text(), true); });
  add(QKeySequence(Qt::SHIFT | Qt::Key_F3), [this] { find(search_edit_->text(), false); });
  add(QKeySequence::Find, [this] {
    search_edit_->setFocus();
    search_edit_->selectAll();
  });
  add(QKeySequence::Copy, [this] { copyRow(); });
  add(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C), [this] { copyJson(); });
}

void EventsView::setPositional(int session, int32_t rank, int64_t events_a, int64_t events_b) {
  session_ = session;
  analysis_.reset();
  search_cache_.clear();
  ++filter_job_;
  rank_box_->clear();
  rank_box_->addItem(QString::number(rank), rank);
  model_->setPositional(session, rank, events_a, events_b);
}

void EventsView::setAnalysis(int session, std::shared_ptr<const Analysis> analysis) {
  session_ = session;
  analysis_ = std::move(analysis);
  rank_box_->clear();
  for (const auto& v : analysis_->ranks) rank_box_->addItem(QString::number(v->rank), v->rank);
  const replay::RankDiff* origin = analysis_->originRank();
  showRank(origin ? origin->rank : (analysis_->ranks.empty() ? 0 : analysis_->ranks.front()->rank));
}

void EventsView::showRank(int32_t rank) {
  if (!analysis_) return;
  auto view = analysis_->rank(rank);
  if (!view) return;
  rank_box_->setCurrentIndex(rank_box_->findData(rank));
  search_cache_.clear();
  model_->setAligned(session_, view);
  applyFilterFromControls();
}

void EventsView::applyFilterFromControls() {
  EventFilter f;
  if (int k = kind_box_->currentData().toInt(); k >= 0) f.kinds.insert(k);
  if (int s = status_box_->currentData().toInt(); s >= 0) {
    f.statuses.insert(s);
  } else if (s == -2) {
    for (int x = 1; x < kStatusCount; ++x) f.statuses.insert(x);
  }
  f.name = name_edit_->text().trimmed();
  setFilter(f);
}

void EventsView::setFilter(const EventFilter& filter) {
  const int job = ++filter_job_;
  auto view = model_->view();
  if (!view || !filter.active()) {
    model_->setFilter(nullptr);
    emit filterApplied();
    return;
  }
  runAsync(
      this,
      [view, filter] {
        return std::make_shared<const std::vector<int64_t>>(filterRows(*view, filter));
      },
      [this, job, view](std::shared_ptr<const std::vector<int64_t>> rows) {
        if (job != filter_job_ || view != model_->view()) return;  // stale
        if (!rows) {  // the filter failed (runAsync): shown as such, the rows left as they were
          info_->setText("The filter could not be applied (internal error).");
          emit filterApplied();
          return;
        }
        model_->setFilter(rows);
        emit filterApplied();
      });
}

int64_t EventsView::currentAlignedRow() const {
  QModelIndex i = table_->currentIndex();
  return i.isValid() ? model_->alignedRow(i.row()) : -1;
}

replay::AlignedRow EventsView::currentPair() const {
  QModelIndex i = table_->currentIndex();
  return i.isValid() ? model_->pairAt(i.row()) : replay::AlignedRow{};
}

bool EventsView::jumpToAlignedRow(int64_t row) {
  int v = model_->viewRowAtOrAfter(row);
  if (v >= model_->rowCount() || model_->alignedRow(v) != row) return false;
  QModelIndex index = model_->index(v, 0);
  table_->setCurrentIndex(index);
  table_->selectRow(v);
  table_->scrollTo(index, QAbstractItemView::PositionAtCenter);
  return true;
}

bool EventsView::jumpToEvent(int side, int64_t seq) {
  auto view = model_->view();
  if (!view) return false;
  return jumpToAlignedRow(side == 0 ? view->rows.rowOfA(seq) : view->rows.rowOfB(seq));
}

bool EventsView::jumpToFirstDivergence() {
  if (!analysis_) return false;
  const replay::RankDiff* origin = analysis_->originRank();
  if (!origin || !origin->first) return false;
  if (model_->rank() != origin->rank) showRank(origin->rank);
  auto view = model_->view();
  int64_t row = origin->first->a >= 0 ? view->rows.rowOfA(origin->first->a)
                                      : view->rows.rowOfB(origin->first->b);
  if (jumpToAlignedRow(row)) return true;
  setFilter({});  // filtered out: show every row, then jump
  return jumpToAlignedRow(row);
}

// The next (or previous) of `rows` (aligned rows, ascending) after the current one that the filter
// lets through.
bool EventsView::jumpAmong(const std::vector<int64_t>& rows, bool forward) {
  int64_t cur = currentAlignedRow();
  if (forward) {
    for (auto it = std::upper_bound(rows.begin(), rows.end(), cur); it != rows.end(); ++it) {
      if (jumpToAlignedRow(*it)) return true;
    }
  } else {
    auto end = std::lower_bound(rows.begin(), rows.end(), cur < 0 ? INT64_MAX : cur);
    for (auto it = std::make_reverse_iterator(end); it != rows.rend(); ++it) {
      if (jumpToAlignedRow(*it)) return true;
    }
  }
  return false;
}

bool EventsView::nextDivergence() {
  return model_->view() && jumpAmong(model_->view()->rows.differingRows(), true);
}

bool EventsView::previousDivergence() {
  return model_->view() && jumpAmong(model_->view()->rows.differingRows(), false);
}

void EventsView::find(const QString& text, bool forward) {
  auto view = model_->view();
  if (!view || text.isEmpty()) {
    emit searchDone(false);
    return;
  }
  if (auto it = search_cache_.find(text); it != search_cache_.end()) {
    emit searchDone(jumpAmong(*it->second, forward));
    return;
  }
  const int job = ++search_job_;
  EventFilter f;
  f.name = text;
  runAsync(
      this,
      [view, f] { return std::make_shared<const std::vector<int64_t>>(filterRows(*view, f)); },
      [this, job, view, text, forward](std::shared_ptr<const std::vector<int64_t>> rows) {
        if (job != search_job_ || view != model_->view()) return;
        if (!rows) {  // the search failed (runAsync): said, and not cached as "not found"
          info_->setText(QString("Searching for “%1” failed (internal error).").arg(text));
          emit searchDone(false);
          return;
        }
        search_cache_[text] = rows;
        bool found = jumpAmong(*rows, forward);
        info_->setText(found ? info_->text() : QString("“%1” not found").arg(text));
        emit searchDone(found);
      });
}

void EventsView::copyRow() {
  QModelIndex i = table_->currentIndex();
  if (i.isValid()) QApplication::clipboard()->setText(model_->rowText(i.row()));
}

void EventsView::copyJson() {
  QModelIndex i = table_->currentIndex();
  if (i.isValid()) {
    QApplication::clipboard()->setText(
        QJsonDocument(model_->rowJson(i.row())).toJson(QJsonDocument::Indented));
  }
}

void EventsView::updateInfo() {
  QString text = QString("rank %1 · %2 row(s) shown").arg(model_->rank()).arg(model_->rowCount());
  if (auto view = model_->view()) {
    text += QString(" of %1 · %2 differing")
                .arg(view->rows.size())
                .arg(view->rows.differingRows().size());
  } else {
    text += " · pairing by position until the analysis finishes";
  }
  QModelIndex i = table_->currentIndex();
  if (i.isValid()) text += QString(" · current row %1").arg(model_->alignedRow(i.row()) + 1);
  info_->setText(text);
}

}  // namespace detrace::gui
