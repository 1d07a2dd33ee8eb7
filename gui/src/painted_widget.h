// A widget drawn by one paint() function, both on screen and into images (the HTML report and
// --screenshot render the plots offscreen at a size of their choosing).
#pragma once

#include <QImage>
#include <QWidget>

class QPainter;

namespace detrace::gui {

class PaintedWidget : public QWidget {
 public:
  using QWidget::QWidget;
  // Draws the widget into a white image of `size`, with the widget's font.
  QImage renderImage(QSize size) const;

 protected:
  void paintEvent(QPaintEvent* event) override;
  virtual void paint(QPainter& p, const QRect& area) const = 0;
};

}  // namespace detrace::gui
