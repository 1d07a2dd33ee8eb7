// The verdict as one self-contained HTML file: the first divergence, per-rank counts, the
// kernel-selection table, warnings, the text report, and the key plots as inline PNG images
// (data: URIs), so the file can be mailed or attached to an issue as is.
#pragma once

#include <QImage>
#include <QString>
#include <vector>

#include "detrace/base/status.h"

#include "analysis.h"

namespace detrace::gui {

struct ReportImage {
  QString caption;
  QImage image;
};

QString htmlReport(const Analysis& analysis, const std::vector<ReportImage>& images);
// A PNG as a data: URI.
QString pngDataUri(const QImage& image);
Status writeTextFile(const QString& path, const QString& text);

}  // namespace detrace::gui
