// The verdict of `detrace diff`, for people (formatDiff) and for tools (diffJson): the same facts.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "detrace/replay/diff.h"

namespace detrace::replay {

struct DiffLabels {
  std::string a = "A";  // how to name the runs in the report (their paths)
  std::string b = "B";
};

std::string formatDiff(const RunDiff& diff, const DiffLabels& labels);
nlohmann::json diffJson(const RunDiff& diff, const DiffLabels& labels);
// "identical", "divergent" or "incomplete" (no divergence on the ranks compared, but a rank of
// either run's world was not compared): the JSON's `verdict`.
const char* diffVerdictName(const RunDiff& diff);
// The "next" line of formatDiff for a rank with a first divergence: the command that would
// confirm the verdict ("" if the rank has none).
std::string nextStepText(const RankDiff& rank, const DiffLabels& labels);
// A rank's deep window comparison (diffJson's ranks[i].deep).
nlohmann::json deepDiffJson(const DeepDiff& deep);

}  // namespace detrace::replay
