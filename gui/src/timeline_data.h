// Timeline data of one rank of both runs: every event with a time, per lane (a CUDA stream, or the
// library ops of a side), in a compact form the timeline paints from. Loaded off the UI thread.
#pragma once

#include <QString>
#include <cstdint>
#include <memory>
#include <vector>

#include "analysis.h"

namespace detrace::gui {

struct Span {
  int64_t start = 0, end = 0;  // ns since the side's first timestamp
  int64_t seq = -1;
  db::EventKind kind = db::EventKind::kOther;
  int8_t status = 0;  // replay::PairStatus of the event's pair (0 = identical)
};

struct Lane {
  QString label;  // "A stream 7", "B library ops"
  int side = 0;
  std::vector<Span> spans;  // by start
  int64_t longest = 0;      // the longest span, for finding what overlaps a time range
};

struct Timeline {
  int32_t rank = -1;
  std::vector<Lane> lanes;          // run A's lanes, then run B's
  int64_t end_ns = 0;               // the latest span end over both sides
  int64_t first_seq[2] = {-1, -1};  // the first divergence on this rank, per side
  // Run B's spans are shifted by this much so that both sides' first divergences start together
  // (0 if either side lacks it): the runs were recorded at different times and speeds.
  int64_t b_shift_ns = 0;

  // The lane and index of event `seq` of `side`, or {-1, -1}.
  std::pair<int, int64_t> find(int side, int64_t seq) const;
};

// Loads rank `rank` of the analysis' pair. GPU times where the recorder has them; library ops
// (GEMMs, collectives) span their kernels, or sit at their API call.
Result<std::shared_ptr<const Timeline>> loadTimeline(const Analysis& analysis, int32_t rank);

}  // namespace detrace::gui
