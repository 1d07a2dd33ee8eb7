// The seam between the Replay tab and whatever re-executes ops. The tab only knows this interface;
// LibraryReplayBackend calls replay/replay.h (`detrace replay`'s library), and tests plug in a
// fake. run() is called off the UI thread and returns plain values.
#pragma once

#include <QString>
#include <QStringList>
#include <functional>
#include <memory>
#include <vector>

#include "detrace/db/run.h"

namespace detrace::gui {

struct ReplayRequest {
  enum class Target { kEventA, kEventB, kPair };  // one event of a run, or the batch-size pair
  Target target = Target::kEventA;
  int32_t rank = 0;
  int64_t seq_a = -1, seq_b = -1;
  QStringList impls;  // empty = every implementation
  int repeat = 3;
  bool allow_gpu = true;
};

// One implementation's outcome, as the results table shows it.
struct ReplayRow {
  QString impl, description, device;
  QString result;  // "reproduces the recorded output", "skipped: no GPU", "error: …", …
  int runs = 0, distinct = 0;
  QString matches_recorded;  // "3/3", "—"
  QString to_recorded;       // "0 ULP", "max 4 ULP (12 elements)", "—"
  QString to_reference;
  QString batch_rows;    // pair: "1/1 rows equal", "—"
  bool control = false;  // a planted defect
};

struct ReplayOutcome {
  QString title;   // the op replayed
  QString report;  // the text `detrace replay` prints
  std::vector<ReplayRow> rows;
  QString error;  // non-empty: nothing ran, and why
};

using ReplayProgressFn = std::function<void(int done, int total, const QString& what)>;

class ReplayBackend {
 public:
  virtual ~ReplayBackend() = default;
  // Whether replay can run in this build; `why` says what is missing if not.
  virtual bool available(QString* why) const = 0;
  // Called on a worker thread; `progress` may be called from it.
  virtual ReplayOutcome run(const ReplayRequest& request, const ReplayProgressFn& progress) = 0;
};

// The real backend over replay/replay.h for runs A and B.
std::shared_ptr<ReplayBackend> makeLibraryReplayBackend(const db::Run& a, const db::Run& b);

}  // namespace detrace::gui
