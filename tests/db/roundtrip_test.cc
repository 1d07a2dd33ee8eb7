// Everything the writer stores comes back from the reader unchanged, on fresh random data.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "detrace/db/reader.h"
#include "detrace/db/schema.h"
#include "detrace/db/writer.h"
#include "test_util.h"

namespace detrace::db {
namespace {

using testing::Rng;
using testing::TempDir;

struct Written {
  std::vector<Event> events;  // with seq filled in
  std::map<int64_t, Collective> collectives;
  std::map<int64_t, Gemm> gemms;
  std::map<int64_t, Marker> markers;
  std::map<int64_t, std::vector<Operand>> operands;
  std::vector<std::string> names;
  std::vector<int64_t> name_ids;
};

Collective randomCollective(Rng& rng, TraceWriter& w) {
  Collective c;
  c.op = static_cast<CollOp>(rng.range(1, 8));
  c.dtype = static_cast<DType>(rng.range(1, 10));
  c.count = rng.range(0, int64_t{1} << 40);
  c.redop = static_cast<RedOp>(rng.range(0, 6));
  c.has_redop_scalar = c.redop == RedOp::kPreMulSum && rng.range(0, 1) != 0;
  if (c.has_redop_scalar) c.redop_scalar = rng.u64();
  c.root = static_cast<int32_t>(rng.range(0, 7));
  c.peer = static_cast<int32_t>(rng.range(0, 7));
  c.comm_id = rng.range(0, int64_t{1} << 62);
  c.comm_rank = static_cast<int32_t>(rng.range(0, 7));
  c.comm_nranks = 8;
  c.comm_seq = rng.range(0, 1 << 20);
  c.algo = w.intern(rng.range(0, 1) ? "Ring" : "Tree");
  c.proto = w.intern(rng.range(0, 1) ? "LL128" : "Simple");
  c.channels = static_cast<int32_t>(rng.range(1, 32));
  c.send_addr = rng.range(0, int64_t{1} << 48);
  c.recv_addr = rng.range(0, int64_t{1} << 48);
  c.group_id = rng.range(0, 100);
  return c;
}

Gemm randomGemm(Rng& rng, TraceWriter& w) {
  Gemm g;
  g.api = w.intern("cublasLtMatmul");
  g.trans_a = static_cast<int32_t>(rng.range(0, 1));
  g.trans_b = static_cast<int32_t>(rng.range(0, 1));
  g.m = rng.range(1, 100000); g.n = rng.range(1, 100000); g.k = rng.range(1, 100000);
  g.lda = rng.range(1, 100000); g.ldb = rng.range(1, 100000);
  g.ldc = rng.range(1, 100000); g.ldd = rng.range(1, 100000);
  g.batch_count = static_cast<int32_t>(rng.range(1, 64));
  g.stride_a = rng.range(0, int64_t{1} << 40); g.stride_b = rng.range(0, int64_t{1} << 40);
  g.stride_c = rng.range(0, int64_t{1} << 40); g.stride_d = rng.range(0, int64_t{1} << 40);
  g.a_dtype = DType::kBF16; g.b_dtype = DType::kBF16; g.c_dtype = DType::kF32; g.d_dtype = DType::kF16;
  g.compute_type = w.intern("CUBLAS_COMPUTE_32F");
  g.algo_id = static_cast<int32_t>(rng.range(0, 100));
  g.tile = static_cast<int32_t>(rng.range(0, 40));
  g.split_k = static_cast<int32_t>(rng.range(1, 16));
  g.reduction_scheme = static_cast<int32_t>(rng.range(0, 4));
  g.stages = static_cast<int32_t>(rng.range(0, 30));
  g.swizzle = static_cast<int32_t>(rng.range(0, 1));
  g.custom_option = static_cast<int32_t>(rng.range(0, 3));
  g.algo_source = static_cast<int32_t>(rng.range(0, 2));
  g.a_addr = rng.range(0, int64_t{1} << 48); g.b_addr = rng.range(0, int64_t{1} << 48);
  g.c_addr = rng.range(0, int64_t{1} << 48); g.d_addr = rng.range(0, int64_t{1} << 48);
  return g;
}

Operand randomOperand(Rng& rng, TraceWriter& w, int64_t seq, int32_t slot) {
  Operand o;
  o.seq = seq;
  o.slot = slot;
  o.name = w.intern(slot == 0 ? "A" : "D");
  o.role = slot == 0 ? OperandRole::kInput : OperandRole::kOutput;
  o.dtype = DType::kBF16;
  int64_t rows = rng.range(1, 20), cols = rng.range(1, 64);
  o.shape = {rows, cols};
  o.address = rng.range(0, int64_t{1} << 48);
  o.rows = rows;
  o.row_bytes = cols * 2;
  o.row_stride = cols * 2;
  o.bytes = rows * cols * 2;
  o.has_digest = true;
  o.digest = rng.u64();
  for (int64_t r = 0; r < rows; ++r) o.row_digests.push_back(rng.u64());
  if (rng.range(0, 1)) {
    o.capture.resize(static_cast<size_t>(o.bytes));
    for (auto& b : o.capture) b = static_cast<uint8_t>(rng.range(0, 3));  // compressible
    o.capture_bytes = o.bytes;
  }
  return o;
}

Written writeRandomTrace(const std::string& path, Rng& rng, int64_t n) {
  Written out;
  WriterOptions options;
  options.policy = OverflowPolicy::kBlock;
  options.batch_events = 97;  // many small batches
  auto writer = TraceWriter::create(path, options);
  EXPECT_TRUE(writer.isOk()) << writer.status().message();
  TraceWriter& w = **writer;
  w.setMeta("command", "python serve.py --tp 2");
  w.setRank({3, 8, 3, 3, 4242, "node7", "NVIDIA H200", "GPU-1234"});
  for (int i = 0; i < 20; ++i) {
    out.names.push_back(fmt::format("kernel_{}<{}>", i, rng.u64()));
    out.name_ids.push_back(w.intern(out.names.back()));
  }
  int64_t stream = w.stream(0x1234, 3, -1);
  for (int64_t i = 0; i < n; ++i) {
    Event e = testing::randomKernel(rng, out.name_ids[static_cast<size_t>(i) % 20], stream);
    std::optional<int64_t> seq;
    switch (rng.range(0, 9)) {
      case 0: {
        e.kind = EventKind::kCollective;
        e.has_launch = false;
        e.launch = LaunchInfo{};
        Collective c = randomCollective(rng, w);
        seq = w.appendCollective(e, c);
        out.collectives[*seq] = c;
        break;
      }
      case 1: {
        e.kind = EventKind::kGemm;
        e.has_launch = false;
        e.launch = LaunchInfo{};
        Gemm g = randomGemm(rng, w);
        seq = w.appendGemm(e, g);
        out.gemms[*seq] = g;
        for (int32_t slot = 0; slot < 2; ++slot) {
          Operand o = randomOperand(rng, w, *seq, slot);
          out.operands[*seq].push_back(o);
          EXPECT_TRUE(w.appendOperand(o));
        }
        break;
      }
      case 2: {
        e.kind = EventKind::kMarker;
        e.has_launch = false;
        e.launch = LaunchInfo{};
        Marker m{MarkerKind::kStep, w.intern("detrace"), rng.range(0, 1000)};
        seq = w.appendMarker(e, m);
        out.markers[*seq] = m;
        break;
      }
      default:
        seq = w.append(e);
    }
    EXPECT_TRUE(seq.has_value());
    EXPECT_EQ(*seq, i);
    e.seq = *seq;
    out.events.push_back(e);
  }
  EXPECT_TRUE(w.close().isOk());
  return out;
}

TEST(RoundTrip, EveryFieldComesBackUnchanged) {
  TempDir dir;
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  std::string path = dir.file("rank3.dtrace");
  Written w = writeRandomTrace(path, rng, 3000);

  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  TraceReader& r = **reader;
  EXPECT_TRUE(r.finished()) << "a closed writer's file reads as unfinished";
  EXPECT_EQ(r.rank(), (RankInfo{3, 8, 3, 3, 4242, "node7", "NVIDIA H200", "GPU-1234"}));
  EXPECT_EQ(r.metaValue("command"), "python serve.py --tp 2");
  EXPECT_EQ(r.metaValue("schema_version"), std::to_string(kSchemaVersion));
  for (size_t i = 0; i < w.names.size(); ++i) EXPECT_EQ(r.str(w.name_ids[i]), w.names[i]);
  ASSERT_EQ(r.streams().size(), 1u);
  EXPECT_EQ(r.streams()[0].handle, 0x1234);
  EXPECT_EQ(*r.eventCount(), 3000);

  auto cursor = r.events();
  ASSERT_TRUE(cursor.isOk());
  size_t i = 0;
  for (;;) {
    auto more = cursor->next();
    ASSERT_TRUE(more.isOk()) << more.status().message();
    if (!*more) break;
    ASSERT_LT(i, w.events.size());
    EXPECT_EQ(cursor->event(), w.events[i]) << "seq " << i;
    ++i;
  }
  EXPECT_EQ(i, w.events.size());

  for (const auto& [seq, c] : w.collectives) EXPECT_EQ(**r.collective(seq), c) << seq;
  for (const auto& [seq, g] : w.gemms) EXPECT_EQ(**r.gemm(seq), g) << seq;
  for (const auto& [seq, m] : w.markers) EXPECT_EQ(**r.marker(seq), m) << seq;
  EXPECT_EQ(r.collectives()->size(), w.collectives.size());
  EXPECT_EQ(r.gemms()->size(), w.gemms.size());
  EXPECT_FALSE(r.gemm(w.events.size() + 5)->has_value());
  for (const auto& [seq, ops] : w.operands) {
    auto got = r.operands(seq);
    ASSERT_TRUE(got.isOk()) << got.status().message();
    ASSERT_EQ(got->size(), ops.size());
    for (size_t k = 0; k < ops.size(); ++k) {
      Operand expect = ops[k];
      expect.id = (*got)[k].id;
      std::vector<uint8_t> bytes = std::move(expect.capture);
      expect.capture.clear();
      EXPECT_EQ((*got)[k], expect);
      auto captured = r.captureBytes((*got)[k].id);
      if (bytes.empty()) {
        EXPECT_EQ(captured.status().code(), ErrorCode::kNotFound);
      } else {
        ASSERT_TRUE(captured.isOk()) << captured.status().message();
        EXPECT_EQ(*captured, bytes);
      }
    }
  }
}

TEST(RoundTrip, RandomAccessMatchesIterationAndCountsAddUp) {
  TempDir dir;
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  Written w = writeRandomTrace(dir.file("t.dtrace"), rng, 2000);
  auto r = TraceReader::open(dir.file("t.dtrace"));
  ASSERT_TRUE(r.isOk());
  for (int k = 0; k < 200; ++k) {
    int64_t seq = rng.range(0, 1999);
    EXPECT_EQ(*(*r)->event(seq), w.events[static_cast<size_t>(seq)]);
  }
  EXPECT_EQ((*r)->event(2000).status().code(), ErrorCode::kNotFound);
  auto counts = (*r)->countsByKind();
  ASSERT_TRUE(counts.isOk());
  int64_t total = 0;
  for (auto [kind, n] : *counts) total += n;
  EXPECT_EQ(total, 2000);
  EXPECT_EQ((*counts)[EventKind::kGemm], static_cast<int64_t>(w.gemms.size()));
  auto stats = (*r)->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["events_written"], 2000);
  EXPECT_EQ((*stats)["events_dropped"], 0);
  // A kind filter and a window.
  auto cursor = (*r)->events(100, 900, EventKind::kGemm);
  int64_t gemms_in_window = 0;
  while (*cursor->next()) {
    EXPECT_EQ(cursor->event().kind, EventKind::kGemm);
    EXPECT_GE(cursor->event().seq, 100);
    EXPECT_LT(cursor->event().seq, 900);
    ++gemms_in_window;
  }
  int64_t expected = 0;
  for (const auto& [seq, g] : w.gemms) expected += seq >= 100 && seq < 900;
  EXPECT_EQ(gemms_in_window, expected);
}

TEST(RoundTrip, SeveralThreadsReadTheSameFileEachWithItsOwnReader) {
  TempDir dir;
  Rng rng;
  Written w = writeRandomTrace(dir.file("t.dtrace"), rng, 1500);
  std::vector<std::thread> threads;
  std::vector<int64_t> seen(4, 0);
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto r = TraceReader::open(dir.file("t.dtrace"));
      if (!r.isOk()) return;
      auto c = (*r)->events();
      while (c.isOk() && *c->next()) {
        if (c->event() == w.events[static_cast<size_t>(c->event().seq)]) ++seen[t];
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t n : seen) EXPECT_EQ(n, 1500);
}

// flush(limit): within the limit it commits as flush() does; a limit too short for the batch
// says so (kUnavailable) and the batch is committed all the same.
TEST(Writer, BoundedFlushSaysWhenItGaveUpAndTheBatchStillLands) {
  testing::TempDir dir;
  WriterOptions o;
  o.policy = OverflowPolicy::kBlock;
  o.queue_capacity = 1 << 20;
  o.flush_interval = std::chrono::milliseconds(60'000);  // only flushes commit
  auto w = TraceWriter::create(dir.file("bounded.dtrace"), o);
  ASSERT_TRUE(w.isOk());
  testing::Rng rng;
  const int64_t name = (*w)->intern("k");
  auto appendMany = [&](int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE((*w)->append(testing::randomKernel(rng, name, -1)));
  };
  appendMany(10);
  EXPECT_TRUE((*w)->flush(std::chrono::milliseconds(30'000)).isOk());
  appendMany(300'000);  // a batch that takes the writer far longer than a microsecond
  const Status quick = (*w)->flush(std::chrono::milliseconds(0));
  EXPECT_EQ(quick.code(), ErrorCode::kUnavailable) << quick.message();
  EXPECT_NE(quick.message().find("did not commit within 0 ms"), std::string::npos) << quick.message();
  EXPECT_TRUE((*w)->flush().isOk());
  ASSERT_TRUE((*w)->close().isOk());
  auto r = TraceReader::open(dir.file("bounded.dtrace"));
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(*(*r)->eventCount(), 300'010);
}

// A tracer's writer makes its file on its own thread (open_in_background): create() returns
// before the file exists (here held 400 ms), records appended meanwhile wait in the queue, and
// every one of them is in the file once it closes, in order.
TEST(Writer, RecordsAppendedBeforeABackgroundOpenMadeTheFileAreCommitted) {
  testing::TempDir dir;
  const std::string path = dir.file("background.dtrace");
  WriterOptions o;
  o.open_in_background = true;
  o.hold_before_open = std::chrono::milliseconds(400);
  auto w = TraceWriter::create(path, o);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  EXPECT_FALSE(std::filesystem::exists(path)) << "create() made the file itself";
  EXPECT_FALSE((*w)->opened());
  testing::Rng rng;
  const int n = static_cast<int>(rng.range(500, 5000));
  std::vector<std::string> names;
  std::vector<Event> appended;
  for (int i = 0; i < n; ++i) {
    names.push_back(fmt::format("kernel_{}", rng.u64()));
    appended.push_back(testing::randomKernel(rng, (*w)->intern(names.back()), -1));
    ASSERT_EQ((*w)->append(appended.back()), std::optional<int64_t>(i));
  }
  EXPECT_FALSE((*w)->opened()) << "the test's hold did not outlast the appends";
  ASSERT_TRUE((*w)->close().isOk()) << (*w)->status().message();
  EXPECT_TRUE((*w)->opened());
  auto r = TraceReader::open(path);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ASSERT_EQ(*(*r)->eventCount(), n);
  for (int i = 0; i < n; i += std::max(1, n / 50)) {
    auto e = (*r)->event(i);
    ASSERT_TRUE(e.isOk()) << e.status().message();
    EXPECT_EQ((*r)->str(e->name), names[static_cast<size_t>(i)]);
    EXPECT_EQ(e->gpu_start_ns, appended[static_cast<size_t>(i)].gpu_start_ns);
  }
}

// A file the writer's thread cannot make (its directory does not exist) is the writer's error,
// not create()'s: the records are dropped and counted, and flush() and close() answer with the
// reason instead of waiting.
TEST(Writer, AFileABackgroundOpenCannotMakeIsTheWritersError) {
  testing::TempDir dir;
  const std::string path = dir.file("missing/dir/t.dtrace");
  WriterOptions o;
  o.open_in_background = true;
  auto w = TraceWriter::create(path, o);
  ASSERT_TRUE(w.isOk()) << w.status().message();
  testing::Rng rng;
  const int64_t name = (*w)->intern("k");
  for (int i = 0; i < 100; ++i) (void)(*w)->append(testing::randomKernel(rng, name, -1));
  const Status st = (*w)->flush();
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_NE(st.message().find("creating trace " + path), std::string::npos) << st.message();
  EXPECT_TRUE((*w)->failed());
  EXPECT_FALSE((*w)->opened());
  EXPECT_FALSE((*w)->append(testing::randomKernel(rng, name, -1)).has_value());
  EXPECT_EQ((*w)->close().message(), st.message());
  EXPECT_EQ((*w)->counters().events_dropped, 101);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace detrace::db

namespace detrace::db {
namespace {

TEST(Writer, ConcurrentProducersGetUniqueDenseSequenceNumbers) {
  testing::TempDir dir;
  WriterOptions o;
  o.policy = OverflowPolicy::kBlock;
  o.queue_capacity = 1000;  // small: producers wait on the writer often
  auto w = TraceWriter::create(dir.file("mt.dtrace"), o);
  ASSERT_TRUE(w.isOk());
  constexpr int kThreads = 4, kPerThread = 20000;
  std::vector<std::vector<int64_t>> seqs(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      testing::Rng rng;
      int64_t name = (*w)->intern(fmt::format("thread{}", t));
      for (int i = 0; i < kPerThread; ++i) {
        Event e = testing::randomKernel(rng, name, -1);
        e.correlation_id = t * kPerThread + i;
        if (auto seq = (*w)->append(e)) seqs[static_cast<size_t>(t)].push_back(*seq);
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE((*w)->close().isOk());
  std::vector<int64_t> all;
  for (const auto& v : seqs) {
    EXPECT_EQ(v.size(), static_cast<size_t>(kPerThread));
    EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
    all.insert(all.end(), v.begin(), v.end());
  }
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int64_t>(i));
  auto r = TraceReader::open(dir.file("mt.dtrace"));
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(*(*r)->eventCount(), kThreads * kPerThread);
  // Each row holds the event its producer was told it got.
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; i += 997) {
      auto e = (*r)->event(seqs[static_cast<size_t>(t)][static_cast<size_t>(i)]);
      ASSERT_TRUE(e.isOk());
      EXPECT_EQ(e->correlation_id, t * kPerThread + i);
      EXPECT_EQ((*r)->str(e->name), fmt::format("thread{}", t));
    }
  }
  EXPECT_EQ((*r)->stats()->at("events_written"), kThreads * kPerThread);
}

}  // namespace
}  // namespace detrace::db
