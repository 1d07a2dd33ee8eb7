// What the divergence views show, computed off the UI thread from replay/ and handed to the UI as
// immutable snapshots (shared_ptr<const …>): the UI thread reads them, never SQLite.
#pragma once

#include <QString>
#include <QStringList>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "detrace/base/status.h"
#include "detrace/db/reader.h"
#include "detrace/db/run.h"
#include "detrace/replay/aligned_rows.h"
#include "detrace/replay/diff.h"

namespace detrace::gui {

// One rank of the compared pair: every aligned row, and each side's event kinds and names (for
// filtering and search without SQLite).
struct RankView {
  int32_t rank = -1;
  replay::AlignedRows rows;
  std::vector<db::TraceReader::EventSkeleton> events[2];         // [0] = run A, [1] = run B, by seq
  std::vector<std::string> names[2];                             // string tables, by id
  std::unordered_map<int64_t, replay::PairStatus> differing[2];  // seq -> status, per side

  const std::string& name(int side, int64_t id) const;
  // Status of event `seq` of `side` (kIdentical unless it is in a differing pair).
  replay::PairStatus statusOf(int side, int64_t seq) const;
};

struct Analysis {
  QStringList paths;                        // every open run
  size_t a = 0, b = 1;                      // the compared pair (indices into paths)
  QString label_a, label_b;                 // short names used in reports
  std::vector<db::Run> runs;                // every open run (directory listings, no connections)
  replay::RunDiff diff;                     // run a vs run b
  std::optional<replay::RunGroups> groups;  // three or more runs
  std::string report;                       // formatDiff's text
  std::string json;                         // diffJson, pretty-printed
  std::vector<std::shared_ptr<const RankView>> ranks;  // in diff.ranks order

  std::shared_ptr<const RankView> rank(int32_t r) const;
  const replay::RankDiff* originRank() const;
  const replay::RankDiff* rankDiff(int32_t r) const;
  std::string nextStep() const;  // the command to run next ("" if identical)
};

using ProgressFn = std::function<void(const QString& what)>;

// Opens the runs and compares them: two runs directly; three or more are grouped first
// (replay::groupRuns) and the largest class is compared with the next one.
Result<std::shared_ptr<const Analysis>> analyse(const QStringList& paths,
                                                const ProgressFn& progress);

// A short label for a run path: its directory name.
QString runLabel(const QString& path);

}  // namespace detrace::gui
