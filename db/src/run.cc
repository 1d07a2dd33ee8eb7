#include "detrace/db/run.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>
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
      {"exit_code", m.exit_code}, {"term_signal", m.term_signal}, {"launcher_pid", m.launcher_pid},
      {"launcher_start_ticks", m.launcher_start_ticks}, {"options", m.options}};
  // Write then rename, so a reader never sees half a manifest. A file-size limit fails the write
  // rather than ending the process (`detrace record` still owes its command's exit status).
  std::string tmp = fmt::format("{}/.{}.tmp", dir, kManifestName);
  {
    FileSizeSignalShield shield;
    std::ofstream out(tmp, std::ios::trunc);
    if (!out.is_open()) {  // nothing written: say why the file could not be made
      const int err = errno;
      std::error_code ec;
      if (fs::status(dir, ec).type() == fs::file_type::not_found) {
        return makeError(ErrorCode::kIo, "cannot write the manifest: the run directory {} no longer exists", dir);
      }
      return makeError(ErrorCode::kIo, "cannot create {}: {}", tmp, std::strerror(err));
    }
    // A command's arguments are bytes (a Latin-1 file name): invalid UTF-8 is written as U+FFFD.
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
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

namespace {

// A manifest field of a known type, or an error naming it: a hand-edited or damaged manifest must
// not pass a wrong type (nlohmann's value() converts a float to an integer silently, and throws for
// a string where a number belongs).
template <typename T>
Status readField(const nlohmann::json& j, const char* key, T& out, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::ok();  // absent: the default stands
  bool fits = true;
  if constexpr (std::is_same_v<T, std::string>) {
    fits = it->is_string();
  } else if constexpr (std::is_integral_v<T>) {
    fits = it->is_number_integer() &&
           (it->is_number_unsigned() ? it->template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                                     : it->template get<int64_t>() >= std::numeric_limits<T>::min() &&
                                           it->template get<int64_t>() <= std::numeric_limits<T>::max());
  }
  if (fits) {
    try {
      out = it->template get<T>();
      return Status::ok();
    } catch (const nlohmann::json::exception&) {
    }
  }
  return makeError(ErrorCode::kCorrupt, "{} is damaged: its field \"{}\" is not {}", path, key,
                   std::is_integral_v<T> ? "an integer in range" : "of the expected type");
}

constexpr uintmax_t kMaxManifestBytes = uintmax_t{16} << 20;
constexpr int32_t kMaxWorldSize = 1 << 20;  // ranks; far beyond any NCCL job

}  // namespace

Result<RunManifest> readManifest(const std::string& dir) {
  const std::string path = fmt::format("{}/{}", dir, kManifestName);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return makeError(ErrorCode::kNotFound, "{} does not exist", path);
  if (ec) return makeError(ErrorCode::kIo, "cannot read {}: {}", path, ec.message());
  if (!fs::is_regular_file(st)) {  // a directory, a pipe (which would block the read), a device
    return makeError(ErrorCode::kNotATrace, "{} is not a regular file, so not a detrace run manifest", path);
  }
  if (fs::file_size(path, ec) > kMaxManifestBytes) {
    return makeError(ErrorCode::kNotATrace, "{} is too large for a detrace run manifest", path);
  }
  std::ifstream in(path);
  if (!in) return makeError(ErrorCode::kIo, "cannot read {} (permission denied?)", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  } catch (...) {  // a read error of the stream itself
    return makeError(ErrorCode::kIo, "cannot read {}", path);
  }
  auto format = j.is_object() ? j.find("format") : j.end();
  if (j.is_discarded() || !j.is_object() || format == j.end() || !format->is_string() ||
      *format != "detrace-run") {
    return makeError(ErrorCode::kNotATrace, "{} is not a detrace run manifest", path);
  }
  // Without its version (left out, or null) a manifest is damaged, as one of the wrong type is: the
  // run's traces are still read. Only another number is another detrace's run.
  if (const auto v = j.find("version"); v == j.end() || v->is_null()) {
    return makeError(ErrorCode::kCorrupt, "{} has no \"version\": the manifest is damaged", path);
  }
  int64_t version = 0;
  DETRACE_RETURN_IF_ERROR(readField(j, "version", version, path));
  if (version != kManifestVersion) {
    return makeError(ErrorCode::kVersionMismatch,
                     "{} has manifest version {}, this detrace reads version {}; use a matching "
                     "detrace",
                     path, version, kManifestVersion);
  }
  RunManifest m;
  DETRACE_RETURN_IF_ERROR(readField(j, "tool_version", m.tool_version, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "command", m.command, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "env", m.env, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "host", m.host, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "start_time_ns", m.start_time_ns, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "end_time_ns", m.end_time_ns, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "exit_code", m.exit_code, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "term_signal", m.term_signal, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "launcher_pid", m.launcher_pid, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "launcher_start_ticks", m.launcher_start_ticks, path));
  DETRACE_RETURN_IF_ERROR(readField(j, "options", m.options, path));
  return m;
}

namespace {

// The directory's trace files, sorted; entries named like one that are not regular files (a pipe,
// a link to nothing or to a device, a directory) go to `left_out`, for a warning.
Result<std::vector<std::string>> traceFilesIn(const std::string& dir, std::vector<std::string>& left_out) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != kTraceExtension) continue;
    std::error_code kind;  // an entry that cannot be stat'ed (a symlink loop) is no trace
    (entry.is_regular_file(kind) ? files : left_out).push_back(entry.path().string());
  }
  if (ec) return makeError(ErrorCode::kIo, "cannot list {}: {}", dir, ec.message());
  std::sort(files.begin(), files.end());
  std::sort(left_out.begin(), left_out.end());
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
    } else if (const ErrorCode code = manifest.status().code();
               code == ErrorCode::kIo || code == ErrorCode::kNotATrace || code == ErrorCode::kCorrupt) {
      // Unreadable (permissions) or damaged (a hand edit, a pipe in its place): the traces still
      // are readable; what only the manifest says is missing.
      run.warnings_.push_back(manifest.status().message() +
                              "; the run's command, host and exit status are unknown (the traces are read without it)");
    } else if (code != ErrorCode::kNotFound) {
      return manifest.status();  // another manifest version: another detrace's run
    }
    std::vector<std::string> left_out;
    DETRACE_ASSIGN_OR_RETURN(files, traceFilesIn(path, left_out));
    if (files.empty() && !manifest.isOk() && manifest.status().code() != ErrorCode::kNotFound) {
      return manifest.status();  // no traces either: what is wrong with the manifest says more
    }
    for (const std::string& f : left_out) {
      run.warnings_.push_back(fmt::format("{} is not a regular file (a pipe, or a link to nothing); left out", f));
    }
    if (files.empty() && run.has_manifest_ && run.manifest_.end_time_ns != 0 && run.manifest_.term_signal == 0) {
      // The command ended on its own and no process of it wrote a trace.
      const auto paused = run.manifest_.options.find("paused");
      if (paused != run.manifest_.options.end() && paused->second == "true") {
        return makeError(ErrorCode::kNotFound,
                         "{} holds no trace files (*{}): it was recorded with --paused and recording "
                         "was never started (`detrace attach {} start` while the program runs)",
                         path, kTraceExtension, path);
      }
      return makeError(ErrorCode::kNotFound,
                       "{} holds no trace files (*{}): its command ran to its end (exit status {}) "
                       "and no process of it made a CUDA, NCCL or cuBLAS call that detrace records, "
                       "or the tracer could not be loaded into it (a static or setuid program: the "
                       "recording's stderr says)",
                       path, kTraceExtension, run.manifest_.exit_code);
    }
    if (files.empty()) {
      return makeError(ErrorCode::kNotFound,
                       "{} holds no trace files (*{}); was the recorded program killed before it "
                       "used the GPU, or is this the wrong directory?",
                       path, kTraceExtension);
    }
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    return makeError(ErrorCode::kNotFound,
                     "{} does not exist: give a run directory made by `detrace record`, or one of its "
                     ".dtrace files",
                     path);
  }

  std::vector<RankFile> unranked;
  Status first_unreadable;
  for (const std::string& f : files) {
    // In a run of several processes, a file its process never recorded into (killed while it
    // created its trace, out of disk or file descriptors: ErrorCode::kNoData) is left out with a
    // warning, not made the whole run's error: the others hold what their processes recorded.
    // Anything else (a foreign or newer file, a trace that cannot be read here) stays an error.
    auto leave_out = [&](const Status& why) {
      if (first_unreadable.isOk()) first_unreadable = why;
      run.unreadable_.push_back(f);
      const bool named = why.message().find(f) != std::string::npos;
      run.warnings_.push_back(named ? fmt::format("left out, it cannot be read: {}", why.message())
                                    : fmt::format("{} is left out, it cannot be read: {}", f, why.message()));
    };
    auto opened = TraceReader::open(f);
    if (!opened.isOk()) {
      if (files.size() == 1 || opened.status().code() != ErrorCode::kNoData) return opened.status();
      leave_out(opened.status());
      continue;
    }
    std::unique_ptr<TraceReader>& reader = *opened;
    RankFile rf{reader->rank().rank, f, reader->rank()};
    if (rf.rank < 0 && rf.info.device < 0) {
      DETRACE_ASSIGN_OR_RETURN(int64_t events, reader->eventCount());
      // The run's one file is kept; an unfinished one (killed before its first commit) may have
      // done GPU work that was never committed: not said to have done none.
      if (events == 0 && files.size() == 1 && reader->finished()) run.no_gpu_work_ = true;
      if (events == 0 && files.size() > 1) {  // a process that did no GPU work is not a rank
        if (!reader->finished()) run.unfinished_.push_back(f);
        run.idle_.push_back(f);
        continue;
      }
    }
    if (!reader->finished()) run.unfinished_.push_back(f);
    const RankInfo& said = reader->rank();
    if (said.world_size > kMaxWorldSize || said.rank >= kMaxWorldSize) {
      return makeError(ErrorCode::kCorrupt,
                       "{} claims rank {} of a world of {}, more than any NCCL job: the file is "
                       "damaged; re-record the run",
                       f, said.rank, said.world_size);
    }
    if (said.rank >= 0 && said.world_size <= said.rank) {
      return makeError(ErrorCode::kCorrupt,
                       "{} claims rank {} of a world of {}, a rank not below its world size: the "
                       "file is damaged; re-record the run",
                       f, said.rank, said.world_size);
    }
    (rf.rank >= 0 ? run.ranks_ : unranked).push_back(std::move(rf));
    run.world_size_ = std::max(run.world_size_, reader->rank().world_size);
  }
  // No rank readable (only idle processes, if any): the files left out were the run; say why.
  if (run.ranks_.empty() && unranked.empty() && !first_unreadable.isOk()) return first_unreadable;
  if (run.ranks_.empty() && unranked.empty() && !run.idle_.empty()) {  // nothing but idle files
    DETRACE_ASSIGN_OR_RETURN(auto reader, TraceReader::open(run.idle_.front()));
    unranked.push_back(RankFile{-1, run.idle_.front(), reader->rank()});
    run.idle_.erase(run.idle_.begin());
    run.no_gpu_work_ = run.unfinished_.empty();  // (as for one file: nothing uncommitted)
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
    return makeError(ErrorCode::kNotFound, "{} has no rank {} (it has {} rank file(s){})", path_, rank,
                     ranks_.size(),
                     unreadable_.empty() ? std::string()
                                         : fmt::format("; left out as unreadable: {}", fmt::join(unreadable_, ", ")));
  }
  return TraceReader::open(rf->path);
}

}  // namespace detrace::db
