// The deep step of bisect (bisect.h): whether it applies to the divergence the digest-level runs
// found, the --deep window over the stretch, and what the diff of the deep runs says.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "detrace/base/status.h"
#include "detrace/db/run.h"
#include "detrace/replay/bisect.h"

namespace detrace::replay::detail {

// What the deep step does: record with `window`, or (window "") only say `note` ("" = nothing).
struct DeepPlan {
  std::string window;
  std::string note;
};

// Decides from the digest-level result `r` and its run A. The window covers the stretch the diff
// bounded: `ops:E:F`, E and F the library-op indices of the last op whose outputs matched and of
// the suspect. A deep window admits a launch while the count of library ops called so far, c,
// satisfies E < c <= F: from op E's own kernels to the raw kernels just before op F. Divergence
// that entered before any fingerprinted op gets `launches:0:N`, N the launches recorded before F.
Result<DeepPlan> planDeepStep(const BisectOptions& o, const BisectResult& r,
                              const db::Run& digest_a);

// Fills `deep` (its window already set) from the diff of the two deep runs.
void readDeepDiff(const RunDiff& diff, int32_t rank, BisectDeep& deep);

// One line for the step list.
std::string deepOutcome(const BisectDeep& deep);

// The verdict of a divergence that entered through raw kernels, with the deep step's findings.
std::string propagatedVerdict(const BisectResult& r);

// The deep step in bisectJson: "deep", and "origin_kernel", "origin_args", ... when it named one.
void addDeepJson(const BisectResult& r, nlohmann::json& j);

}  // namespace detrace::replay::detail
