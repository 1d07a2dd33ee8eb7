// The timeline widget: zoom, pan and fit keep the view consistent, a click selects the event under
// the cursor, and divergences are painted in their status colour.
#include <QSignalSpy>
#include <QTest>

#include "gui_test_util.h"
#include "status_style.h"
#include "suites.h"

namespace detrace::gui::testing {
namespace {

// Two lanes of A and one of B, the second event of A's stream 1 differs.
std::shared_ptr<const Timeline> sample() {
  auto t = std::make_shared<Timeline>();
  t->rank = 0;
  Lane a{"A stream 1", 0, {}, 0};
  for (int i = 0; i < 10; ++i)
    a.spans.push_back({i * 1000, i * 1000 + 500, i, db::EventKind::kKernel, 0});
  a.spans[1].status = static_cast<int8_t>(replay::PairStatus::kNondeterministic);
  a.longest = 500;
  Lane b{"B stream 1", 1, {}, 0};
  for (int i = 0; i < 10; ++i)
    b.spans.push_back({i * 1000, i * 1000 + 500, i, db::EventKind::kKernel, 0});
  b.spans[1].status = static_cast<int8_t>(replay::PairStatus::kNondeterministic);
  b.longest = 500;
  t->lanes = {a, b};
  t->end_ns = 9500;
  t->first_seq[0] = t->first_seq[1] = 1;
  return t;
}

class TimelineSuite : public QObject {
  Q_OBJECT

 private slots:
  void zoomPanFit() {
    TimelineWidget w;
    w.resize(1150, 200);
    w.setTimeline(sample());
    QVERIFY(w.viewStart() < 0 && w.viewEnd() > 9500);
    double span = w.viewEnd() - w.viewStart();
    w.zoom(0.5, 5000);
    QCOMPARE(w.viewEnd() - w.viewStart(), span / 2);
    QVERIFY(w.viewStart() < 5000 && w.viewEnd() > 5000);
    double x0 = w.viewStart();
    w.pan(0.5);
    QCOMPARE(w.viewStart(), x0 + span / 4);
    QTest::keyClick(&w, Qt::Key_0);
    QCOMPARE(w.viewEnd() - w.viewStart(), span);
    QVERIFY(w.focusEvent(0, 5));
    QVERIFY(w.viewStart() <= 5000 && w.viewEnd() >= 5500);
    QVERIFY(!w.focusEvent(0, 99));
  }

  void clickSelectsAnEvent() {
    TimelineWidget w;
    w.resize(1150, 200);
    w.setTimeline(sample());
    w.setView(0, 10000);  // plot from x=150 to x=1142: 1000 ns ~ 99 px
    w.show();
    QSignalSpy clicked(&w, &TimelineWidget::eventClicked);
    // Lane 1 (B) starts at y = 24 + 26; event 3 spans 3000..3500 ns.
    QTest::mouseClick(&w, Qt::LeftButton, Qt::NoModifier, QPoint(150 + 322, 24 + 26 + 13));
    QCOMPARE(clicked.count(), 1);
    QCOMPARE(clicked[0][0].toInt(), 1);
    QCOMPARE(clicked[0][1].toLongLong(), 3LL);
  }

  void divergencesArePaintedInTheirColour() {
    TimelineWidget w;
    w.resize(1150, 200);
    w.setTimeline(sample());
    w.setView(0, 10000);
    QImage img = w.renderImage(QSize(1150, 200));
    const QColor mark = statusMarkColor(replay::PairStatus::kNondeterministic);
    // Event 1 of lane 0 spans 1000..1500 ns: x ~ 249..298, y in 24 + 7 .. 24 + 23.
    QCOMPARE(img.pixelColor(275, 24 + 15), mark);
    // Event 2 is identical: kernel colour.
    QVERIFY(img.pixelColor(375, 24 + 15) != mark);
    QVERIFY(img.pixelColor(375, 24 + 15) != QColor(Qt::white));
  }

  void realRunTimelineHasBothSidesStreams() {
    MainWindow window;
    QVERIFY(openAndWait(window, {runPath("nondet-a"), runPath("nondet-b")}, true));
    auto t = window.timeline()->widget()->timeline();
    QVERIFY(t);
    size_t spans[2] = {0, 0};
    for (const Lane& l : t->lanes) spans[l.side] += l.spans.size();
    QCOMPARE(spans[0], size_t{360});  // every event of nondet-a has a time
    QCOMPARE(spans[1], size_t{360});
    QCOMPARE(t->first_seq[0], int64_t{122});
    // Clicking an event in the timeline selects it in the aligned events.
    emit window.timeline()->widget()->eventClicked(1, 104);
    QCOMPARE(window.events()->currentPair().b, int64_t{104});
  }
};

}  // namespace

std::unique_ptr<QObject> makeTimelineSuite() { return std::make_unique<TimelineSuite>(); }

}  // namespace detrace::gui::testing

#include "timeline_test.moc"
