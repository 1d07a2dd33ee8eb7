// Shared helpers for the trace-store tests: temporary directories and random records.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "detrace/db/reader.h"
#include "detrace/db/records.h"
#include "detrace/db/run.h"

namespace detrace::testing {

// A fresh directory under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            fmt::format("detrace-test-{}-{:08x}", getpid(), rd());
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Random generator seeded from std::random_device; the seed is printed with any failure.
class Rng {
 public:
  Rng() : seed_(std::random_device{}()), gen_(seed_) {}
  uint32_t seed() const { return seed_; }
  int64_t range(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  uint64_t u64() { return (static_cast<uint64_t>(gen_()) << 32) ^ gen_(); }
  std::mt19937& gen() { return gen_; }

 private:
  uint32_t seed_;
  std::mt19937 gen_;
};

inline db::Event randomKernel(Rng& rng, int64_t name, int64_t stream) {
  db::Event e;
  e.kind = db::EventKind::kKernel;
  e.name = name;
  e.stream = stream;
  e.device = static_cast<int32_t>(rng.range(0, 7));
  e.cpu_ns = rng.range(1, int64_t{1} << 62);
  e.gpu_start_ns = e.cpu_ns + rng.range(0, 1'000'000);
  e.gpu_end_ns = e.gpu_start_ns + rng.range(0, 1'000'000);
  e.correlation_id = rng.range(1, int64_t{1} << 40);
  if (rng.range(0, 1)) {
    e.graph_id = rng.range(0, 1000);
    e.graph_node_id = rng.range(0, int64_t{1} << 40);
  }
  e.has_launch = true;
  e.launch.grid = {static_cast<int32_t>(rng.range(1, 0x7fffffff)),
                   static_cast<int32_t>(rng.range(1, 65535)), static_cast<int32_t>(rng.range(1, 65535))};
  e.launch.block = {static_cast<int32_t>(rng.range(1, 1024)), static_cast<int32_t>(rng.range(1, 1024)),
                    static_cast<int32_t>(rng.range(1, 64))};
  e.launch.smem_static = static_cast<int32_t>(rng.range(0, 49152));
  e.launch.smem_dynamic = static_cast<int32_t>(rng.range(0, 232448));
  e.launch.registers = static_cast<int32_t>(rng.range(1, 255));
  e.launch.api = static_cast<db::LaunchApi>(rng.range(0, 5));
  return e;
}

// Reads every event of `r` and checks that each is the one written at its position (its seq and
// its correlation_id both equal to it, as the crash tests number their rows: nothing torn, nothing
// reordered); returns how many were read, stopping at the first that is not.
inline int64_t rowsInOrder(db::TraceReader& r) {
  auto cursor = r.events();
  EXPECT_TRUE(cursor.isOk()) << cursor.status().message();
  if (!cursor.isOk()) return -1;
  int64_t n = 0;
  for (;;) {
    auto more = cursor->next();
    EXPECT_TRUE(more.isOk()) << more.status().message();
    if (!more.isOk() || !*more) return n;
    const db::Event& e = cursor->event();
    if (e.seq != n || e.correlation_id != n) {
      ADD_FAILURE() << "row " << n << " holds seq " << e.seq << ", correlation id " << e.correlation_id;
      return n;
    }
    ++n;
  }
}

// The reader of a run's one rank file: an error when the run cannot be opened or holds another
// number of ranks (the recorded test programs are one process each).
inline Result<std::unique_ptr<db::TraceReader>> openOnlyRank(const std::string& run) {
  DETRACE_ASSIGN_OR_RETURN(db::Run r, db::Run::open(run));
  if (r.ranks().size() != 1) {
    return makeError(ErrorCode::kInvalidArgument, "{} holds {} ranks, not one", run, r.ranks().size());
  }
  return r.openRank(r.ranks().front().rank);
}

// Calls fn(path) for every trace checked into tests/data (runs/ and replay/, recorded before the
// columns and tables added later within schema version 1); returns how many there were.
template <typename Fn>
int forEachCheckedInTrace(Fn&& fn) {
  int files = 0;
  for (const char* sub : {"runs", "replay"}) {
    const std::filesystem::path root = std::filesystem::path(DETRACE_TEST_DATA_DIR) / sub;
    if (!std::filesystem::exists(root)) continue;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
      if (e.path().extension() != ".dtrace") continue;
      SCOPED_TRACE(e.path().string());
      fn(e.path().string());
      ++files;
    }
  }
  return files;
}

// Every way the reader gives a details table's rows (`all`: all at once; `range`: a range at a
// time; `one`: by seq) against `expected`, whose index is the row's seq. E.g. for the gemms:
//   [](auto& r) { return r.gemms(); }, [](auto& r, auto fn) { return r.forEachGemm(0, INT64_MAX,
//   fn); }, [](auto& r, int64_t seq) { return r.gemm(seq); }
template <typename T, typename All, typename Range, typename One>
void expectEveryReadPath(const std::string& path, const std::vector<T>& expected, All all,
                         Range range, One one) {
  auto r = db::TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  auto rows = all(**r);
  ASSERT_TRUE(rows.isOk()) << rows.status().message();
  ASSERT_EQ(rows->size(), expected.size());
  size_t scanned = 0;
  Status st = range(**r, [&](int64_t seq, const T& row) {
    EXPECT_EQ(row, expected[static_cast<size_t>(seq)]) << seq;
    ++scanned;
    return Status::ok();
  });
  EXPECT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(scanned, expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ((*rows)[i].second, expected[i]) << i;
    auto by_seq = one(**r, static_cast<int64_t>(i));
    ASSERT_TRUE(by_seq.isOk() && by_seq->has_value()) << i;
    EXPECT_EQ(**by_seq, expected[i]) << i;
  }
}

}  // namespace detrace::testing
