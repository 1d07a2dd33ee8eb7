#include "html_report.h"

#include <QBuffer>
#include <QDateTime>
#include <QFile>

#include "detrace/base/version.h"
#include "detrace/replay/diff.h"

#include "status_style.h"

namespace detrace::gui {
namespace {

QString esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }
QString esc(const QString& s) { return s.toHtmlEscaped(); }
QString seqText(int64_t seq) { return seq >= 0 ? QString::number(seq) : QString("—"); }

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:24px;max-width:1400px;color:#222}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px "
    "8px;text-align:left;vertical-align:top}"
    "th{background:#f0f0f0}.divergent{color:#a00000}.identical{color:#106010}"
    "pre{background:#f7f7f7;padding:12px;overflow-x:auto;font-size:12px}"
    "figure{margin:12px 0}figcaption{font-size:13px;color:#555}img{border:1px solid "
    "#ddd;max-width:100%}";

QString verdictSection(const Analysis& a) {
  const replay::RankDiff* origin = a.originRank();
  if (!origin || !origin->first) {
    return QString(
               "<h1 class='identical'>IDENTICAL: %1 and %2 match on every compared rank (%3 "
               "rank(s)).</h1>")
        .arg(esc(a.label_a), esc(a.label_b))
        .arg(a.diff.ranks.size());
  }
  const replay::PairDiff& f = *origin->first;
  QString html = QString("<h1 class='divergent'>DIVERGENT: %1 and %2 part on rank %3.</h1>")
                     .arg(esc(a.label_a), esc(a.label_b))
                     .arg(origin->rank);
  if (a.diff.batch_mode)
    html +=
        "<p>Batch-size mode: the runs' token counts differ; the request's rows are compared.</p>";
  auto row = [](const QString& k, const QString& v) {
    return QString("<tr><th>%1</th><td>%2</td></tr>").arg(k, v);
  };
  html += "<table>";
  html +=
      row("first divergence", QString("rank %1, event %2 in A / %3 in B, after %4 collective(s)")
                                  .arg(origin->rank)
                                  .arg(seqText(f.a), seqText(f.b))
                                  .arg(f.collectives_before));
  html += row("op in A", esc(origin->first_a));
  html += row("op in B", esc(origin->first_b));
  html += row("classification", QString("<span style='background:%1;padding:0 4px'>%2</span>")
                                    .arg(statusColor(f.status).name(), esc(statusName(f.status))));
  html += row("why", esc(origin->why));
  if (origin->deep) html += row("deep window", esc(replay::deepVerdictText(*origin->deep)));
  html += row("after it",
              QString("%1 more differing event(s) on this rank").arg(origin->differingEvents() - 1));
  html += row("next", "<code>" + esc(a.nextStep()) + "</code>");
  return html + "</table>";
}

QString ranksSection(const Analysis& a) {
  QString html =
      "<h2>Per rank</h2><table><tr><th>rank</th><th>events A</th><th>events B</th>"
      "<th>first at A / B</th><th>status</th><th>differing</th></tr>";
  for (const replay::RankDiff& r : a.diff.ranks) {
    html +=
        QString("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4 / %5</td><td>%6</td><td>%7</td></tr>")
            .arg(r.rank)
            .arg(r.events_a)
            .arg(r.events_b)
            .arg(r.first ? seqText(r.first->a) : "—", r.first ? seqText(r.first->b) : "—",
                 r.first ? esc(statusName(r.first->status)) : "identical")
            .arg(r.differingEvents());
  }
  return html + "</table>";
}

QString selectionSection(const Analysis& a) {
  if (a.diff.selection_changes.empty()) return {};
  QString html =
      "<h2>Kernel selection changes (same op and shape)</h2><table><tr><th>op kind</th>"
      "<th>ran in A</th><th>ran in B</th><th>times</th></tr>";
  for (const replay::SelectionChange& c : a.diff.selection_changes) {
    html += QString("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td></tr>")
                .arg(QString(db::eventKindName(c.kind)), esc(replay::shortKernelName(c.a)),
                     esc(replay::shortKernelName(c.b)))
                .arg(c.count);
  }
  return html + "</table>";
}

}  // namespace

QString pngDataUri(const QImage& image) {
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  image.save(&buffer, "PNG");
  return "data:image/png;base64," + QString::fromLatin1(bytes.toBase64());
}

QString htmlReport(const Analysis& a, const std::vector<ReportImage>& images) {
  QString html =
      QString(
          "<!DOCTYPE html><html><head><meta charset='utf-8'><title>detrace: %1 vs %2</title>"
          "<style>%3</style></head><body>")
          .arg(esc(a.label_a), esc(a.label_b), QString(kStyle));
  html += QString("<p>Runs: A = <code>%1</code>, B = <code>%2</code>")
              .arg(esc(a.paths[static_cast<int>(a.a)]), esc(a.paths[static_cast<int>(a.b)]));
  if (a.paths.size() > 2) html += QString(" (compared out of %1 runs)").arg(a.paths.size());
  html += "</p>" + verdictSection(a) + ranksSection(a) + selectionSection(a);
  if (!a.diff.warnings.empty()) {
    html += "<h2>Warnings</h2><ul>";
    for (const std::string& w : a.diff.warnings) html += "<li>" + esc(w) + "</li>";
    html += "</ul>";
  }
  if (!images.empty()) html += "<h2>Plots</h2>";
  for (const ReportImage& img : images) {
    if (img.image.isNull()) continue;
    html += QString("<figure><img alt='%1' src='%2'><figcaption>%1</figcaption></figure>")
                .arg(esc(img.caption), pngDataUri(img.image));
  }
  html +=
      "<h2>Report (as <code>detrace diff</code> prints it)</h2><pre>" + esc(a.report) + "</pre>";
  html += QString(
              "<p style='color:#888;font-size:12px'>Generated by detrace-view %1 on "
              "%2.</p></body></html>")
              .arg(QString(kToolVersion), QDateTime::currentDateTime().toString(Qt::ISODate));
  return html;
}

Status writeTextFile(const QString& path, const QString& text) {
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
    return makeError(ErrorCode::kIo, "cannot write {}: {}", path.toStdString(),
                     file.errorString().toStdString());
  }
  QByteArray bytes = text.toUtf8();
  if (file.write(bytes) != bytes.size()) {
    return makeError(ErrorCode::kIo, "cannot write {}: {}", path.toStdString(),
                     file.errorString().toStdString());
  }
  return Status();
}

}  // namespace detrace::gui
