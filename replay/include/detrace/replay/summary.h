// What `detrace info` shows: a run's ranks, event counts by kind, time span, versions and drops.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "detrace/base/status.h"
#include "detrace/db/records.h"
#include "detrace/db/run.h"

namespace detrace::replay {

struct RankSummary {
  db::RankInfo info;
  std::string path;
  int64_t events = 0;
  std::map<db::EventKind, int64_t> by_kind;
  int64_t first_ns = db::kUnset;
  int64_t last_ns = db::kUnset;
  std::map<std::string, int64_t> stats;  // events_dropped, bytes_captured, ...
  std::map<std::string, std::string> meta;
  bool finished = true;  // db::TraceReader::finished
};

struct RunSummary {
  std::string path;
  int32_t world_size = 0;
  std::vector<int32_t> missing_ranks;
  std::vector<std::string> warnings;
  std::vector<std::string> idle_files;  // processes that did no GPU work (db::Run::idleFiles)
  std::vector<std::string> unfinished_files;  // db::Run::unfinishedFiles
  std::vector<std::string> unreadable_files;  // left out of a run of several (Run::unreadableFiles)
  bool has_manifest = false;
  db::RunManifest manifest;
  std::vector<RankSummary> ranks;
};

Result<RunSummary> summarize(const db::Run& run);
std::string formatSummary(const RunSummary& summary);
nlohmann::json summaryJson(const RunSummary& summary);

}  // namespace detrace::replay
