// A run: one directory holding manifest.json and one trace file per recorded process (rank).
// Everything that reads a run accepts the directory (or a single .dtrace file) and treats its ranks
// as one run.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "detrace/base/status.h"
#include "detrace/db/reader.h"

namespace detrace::db {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr int kManifestVersion = 1;

// manifest.json, written by `detrace record` when the recorded command starts and again when it ends.
struct RunManifest {
  std::string tool_version;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;  // the environment variables that matter for replay
  std::string host;
  int64_t start_time_ns = 0;
  int64_t end_time_ns = 0;  // 0 while recording or if the recorder was killed
  int exit_code = -1;       // the recorded command's exit status, -1 if unknown
  int term_signal = 0;      // the signal that killed the command (exit_code is then 128 + it), else 0
  int32_t launcher_pid = 0;            // the `detrace record` that made the run, 0 if unknown
  int64_t launcher_start_ticks = -1;   // its start (/proc/<pid>/stat field 22): pid reuse tells
  std::map<std::string, std::string> options;  // detrace record's options
};

Status writeManifest(const std::string& dir, const RunManifest& manifest);
Result<RunManifest> readManifest(const std::string& dir);

struct RankFile {
  int32_t rank = -1;
  std::string path;
  RankInfo info;
};

class Run {
 public:
  // `path` is a run directory or one .dtrace file.
  static Result<Run> open(const std::string& path);

  const std::string& path() const { return path_; }
  bool hasManifest() const { return has_manifest_; }
  const RunManifest& manifest() const { return manifest_; }
  // Rank files sorted by rank.
  const std::vector<RankFile>& ranks() const { return ranks_; }
  int32_t worldSize() const { return world_size_; }
  // Ranks the world size promises but no file holds (e.g. a rank crashed before writing).
  const std::vector<int32_t>& missingRanks() const { return missing_; }
  // Things a user should know that did not stop the open (e.g. ranks inferred from file order).
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Trace files of processes that did no GPU work (no events, no rank, no device: a launcher
  // such as torchrun's agent, a shell), left out of ranks() when the run has other files.
  const std::vector<std::string>& idleFiles() const { return idle_; }
  // No process of the run did GPU work: every file is such an idle one (the run's one rank is then
  // the first of them, with no events). Nothing in it can be compared.
  bool noGpuWork() const { return no_gpu_work_; }
  // Trace files whose writer never closed them (TraceReader::finished): a process killed, still
  // recording, or whose trace stopped on a write error. Each holds what was committed before.
  const std::vector<std::string>& unfinishedFiles() const { return unfinished_; }
  // Trace files of a run of several that could not be read at all (a warning says why each),
  // left out of ranks().
  const std::vector<std::string>& unreadableFiles() const { return unreadable_; }

  const RankFile* findRank(int32_t rank) const;
  // A new reader (its own connection) for `rank`; call it once per thread.
  Result<std::unique_ptr<TraceReader>> openRank(int32_t rank) const;

 private:
  std::string path_;
  bool has_manifest_ = false;
  RunManifest manifest_;
  std::vector<RankFile> ranks_;
  int32_t world_size_ = 1;
  std::vector<int32_t> missing_;
  std::vector<std::string> warnings_;
  std::vector<std::string> idle_;
  bool no_gpu_work_ = false;
  std::vector<std::string> unfinished_;
  std::vector<std::string> unreadable_;
};

}  // namespace detrace::db
