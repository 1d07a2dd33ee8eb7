// The verdict tab: the first divergence (rank, position, the op on both sides, classification,
// why, the deep window's verdict when both runs have one, the next command), a button that jumps to it, the per-rank summary and the full text report
// (replay::formatDiff, the same as `detrace diff`).
#pragma once

#include <QWidget>
#include <map>
#include <memory>

#include "analysis.h"

class QFormLayout;
class QLabel;
class QPlainTextEdit;
class QPushButton;

namespace detrace::gui {

class VerdictPanel : public QWidget {
  Q_OBJECT

 public:
  explicit VerdictPanel(QWidget* parent = nullptr);
  void showProgress(const QString& what);
  void showError(const QString& error);
  void setAnalysis(std::shared_ptr<const Analysis> analysis);

  // What is shown (tests and the HTML report read these).
  QString headline() const;
  QString field(
      const QString& name) const;  // "position", "op_a", "op_b", "status", "why", "deep", "after",
                                   // "next"
  QString reportText() const;
  QPushButton* jumpButton() { return jump_; }

 signals:
  void jumpRequested();

 private:
  QLabel* addField(const QString& key, const QString& label);
  void clearFields();

  QLabel* headline_ = nullptr;
  QLabel* mode_ = nullptr;
  QWidget* fields_box_ = nullptr;
  QFormLayout* form_ = nullptr;
  QLabel* ranks_ = nullptr;
  QLabel* warnings_ = nullptr;
  QPushButton* jump_ = nullptr;
  QPushButton* copy_next_ = nullptr;
  QPlainTextEdit* report_ = nullptr;
  std::map<QString, QLabel*> fields_;
};

}  // namespace detrace::gui
