#include "detrace/db/run.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "detrace/db/schema.h"
#include "file_size_signal.h"
#include "write_failure.h"

namespace fs = std::filesystem;

namespace detrace::db {

Status writeManifest(const std::string& dir, const RunManifest& m) {
  nlohmann::json j = {
      {"format", "detrace-run"}, {"version", kManifestVersion}, {"tool_version", m.tool_version},
      {"command", m.command},    {"env", m.env},                {"host", m.host},
      {"start_time_ns", m.start_time_ns}, {"end_time_ns", m.end_time_ns},
      {"exit_code", m.exit_code}, {"options", m.options}};
  // Write then rename, so a reader never sees half a manifest. A file-size limit fails the write
  // rather than ending the process (`detrace record` still owes its command's exit status).
  std::string tmp = fmt::format("{}/.{}.tmp", dir, kManifestName);
  {
    FileSizeSignalShield shield;
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << '\n';
    if (!out.flush()) {
      std::string cause = writeFailureCause({tmp}, 4096);
      out.close();
      std::error_code ignored;
      fs::remove(tmp, ignored);  // no half manifest left behind
      return makeError(ErrorCode::kIo, "cannot write {}: {}", tmp,
                       cause.empty() ? "is the disk full?" : cause);
    }
  }
  std::error_code ec;
  fs::rename(tmp, fmt::format("{}/{}", dir, kManifestName), ec);
  if (ec) return makeError(ErrorCode::kIo, "cannot write the manifest in {}: {}", dir, ec.message());
  return Status::ok();
}

Result<RunManifest> readManifest(const std::string& dir) {
  std::string path = fmt::format("{}/{}", dir, kManifestName);
  std::ifstream in(path);
  if (!in) return makeError(ErrorCode::kNotFound, "{} does not exist", path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != "detrace-run") {
    return makeError(ErrorCode::kNotATrace, "{} is not a detrace run manifest", path);
  }
  if (j.value("version", 0) != kManifestVersion) {
    return makeError(ErrorCode::kVersionMismatch,
                     "{} has manifest version {}, this detrace reads version {}; use a matching "
                     "detrace",
                     path, j.value("version", 0), kManifestVersion);
  }
  RunManifest m;
  try {
    m.tool_version = j.value("tool_version", "");
    m.command = j.value("command", std::vector<std::string>{});
    m.env = j.value("env", std::map<std::string, std::string>{});
    m.host = j.value("host", "");
    m.start_time_ns = j.value("start_time_ns", int64_t{0});
    m.end_time_ns = j.value("end_time_ns", int64_t{0});
    m.exit_code = j.value("exit_code", -1);
    m.options = j.value("options", std::map<std::string, std::string>{});
  } catch (const nlohmann::json::exception& e) {
    return makeError(ErrorCode::kCorrupt, "{} has a field of the wrong type ({})", path, e.what());
  }
  return m;
}

namespace {

Result<std::vector<std::string>> traceFilesIn(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == kTraceExtension) {
      files.push_back(entry.path().string());
    }
  }
  if (ec) return makeError(ErrorCode::kIo, "cannot list {}: {}", dir, ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

Result<Run> Run::open(const std::string& path) {
  Run run;
  run.path_ = path;
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    auto manifest = readManifest(path);
    if (manifest.isOk()) {
      run.has_manifest_ = true;
      run.manifest_ = *manifest;
    } else if (manifest.status().code() != ErrorCode::kNotFound) {
      return manifest.status();
    }
    DETRACE_ASSIGN_OR_RETURN(files, traceFilesIn(path));
    if (files.empty()) {
      return makeError(ErrorCode::kNotFound,
                       "{} holds no trace files (*{}); was the recorded program killed before it "
                       "used the GPU, or is this the wrong directory?",
                       path, kTraceExtension);
    }
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    return makeError(ErrorCode::kNotFound, "{} does not exist", path);
  }

  std::vector<RankFile> unranked;
  for (const std::string& f : files) {
    DETRACE_ASSIGN_OR_RETURN(auto reader, TraceReader::open(f));
    if (!reader->finished()) run.unfinished_.push_back(f);
    RankFile rf{reader->rank().rank, f, reader->rank()};
    if (rf.rank < 0 && files.size() > 1 && rf.info.device < 0) {
      DETRACE_ASSIGN_OR_RETURN(int64_t events, reader->eventCount());
      if (events == 0) {  // a process that did no GPU work is not a rank
        run.idle_.push_back(f);
        continue;
      }
    }
    (rf.rank >= 0 ? run.ranks_ : unranked).push_back(std::move(rf));
    run.world_size_ = std::max(run.world_size_, reader->rank().world_size);
  }
  if (run.ranks_.empty() && unranked.empty() && !run.idle_.empty()) {  // nothing but idle files
    DETRACE_ASSIGN_OR_RETURN(auto reader, TraceReader::open(run.idle_.front()));
    unranked.push_back(RankFile{-1, run.idle_.front(), reader->rank()});
    run.idle_.erase(run.idle_.begin());
  }
  std::sort(run.ranks_.begin(), run.ranks_.end(),
            [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  for (size_t i = 1; i < run.ranks_.size(); ++i) {
    if (run.ranks_[i].rank == run.ranks_[i - 1].rank) {
      return makeError(ErrorCode::kInvalidArgument,
                       "two files claim rank {} ({} and {}): the directory mixes runs; record each "
                       "run into its own directory",
                       run.ranks_[i].rank, run.ranks_[i - 1].path, run.ranks_[i].path);
    }
  }
  // Processes that never joined an NCCL communicator: number them after the known ranks.
  int32_t next = run.ranks_.empty() ? 0 : run.ranks_.back().rank + 1;
  for (RankFile& rf : unranked) {
    if (files.size() > 1) {
      run.warnings_.push_back(fmt::format("{} has no NCCL rank; treating it as rank {}", rf.path, next));
    }
    rf.rank = next++;
    run.ranks_.push_back(std::move(rf));
  }
  run.world_size_ = std::max(run.world_size_, static_cast<int32_t>(run.ranks_.size()));
  std::set<int32_t> present;
  for (const RankFile& rf : run.ranks_) present.insert(rf.rank);
  for (int32_t r = 0; r < run.world_size_; ++r) {
    if (!present.count(r)) run.missing_.push_back(r);
  }
  return run;
}

const RankFile* Run::findRank(int32_t rank) const {
  for (const RankFile& rf : ranks_) {
    if (rf.rank == rank) return &rf;
  }
  return nullptr;
}

Result<std::unique_ptr<TraceReader>> Run::openRank(int32_t rank) const {
  const RankFile* rf = findRank(rank);
  if (rf == nullptr) {
    return makeError(ErrorCode::kNotFound, "{} has no rank {} (it has {} rank file(s))", path_, rank,
                     ranks_.size());
  }
  return TraceReader::open(rf->path);
}

}  // namespace detrace::db
