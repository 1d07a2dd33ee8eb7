#include "painted_widget.h"

#include <QPainter>

namespace detrace::gui {

void PaintedWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  paint(p, rect());
}

QImage PaintedWidget::renderImage(QSize size) const {
  QImage image(size, QImage::Format_ARGB32);
  image.fill(Qt::white);
  QPainter p(&image);
  p.setFont(font());
  paint(p, QRect(QPoint(0, 0), size));
  return image;
}

}  // namespace detrace::gui
