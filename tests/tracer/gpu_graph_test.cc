// Records `tracer_gpu_app graph DIR` (tests/tracer/graph_gpu_app.cuh: a cuBLASLt matmul and a
// cublasGemmEx captured into one CUDA graph, a world-size-1 ncclAllReduce into another, each graph
// launched 4 times with new inputs and poisoned outputs) and checks that every launch gave every
// captured op its own fingerprints: one replayed event per op and launch, linked to the call
// recorded at capture (graph_ops), whose operands' digests and row digests equal the CPU twin's
// digests of the bytes the program copied back after that launch. First, the digest kernels those
// graphs capture (Digester::digestVia, digestRowsVia, storeWords) against the CPU twin, directly.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <xxhash.h>

#include <gtest/gtest.h>

#include "detrace/db/reader.h"
#include "detrace/db/run.h"
#include "detrace/kernels/digest.h"

#include "../db/test_util.h"
#include "../kernels/kernels_gpu_util.h"
#include "common/gpu_test.h"
#include "common/shell.h"
#include "graph_threads_values.h"

namespace detrace {
namespace {

std::vector<uint8_t> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The operand's digest computed on the CPU from its bytes (docs/digest.md); its row digests too.
uint64_t cpuDigest(const db::Operand& o, const std::vector<uint8_t>& bytes,
                   std::vector<uint64_t>& rows) {
  rows.clear();
  if (o.rows <= 0) return kernels::digestCpu(bytes.data(), bytes.size());
  rows.resize(static_cast<size_t>(o.rows));
  kernels::digestRowsCpu(bytes.data(), static_cast<uint32_t>(o.rows),
                         static_cast<uint64_t>(o.row_bytes), static_cast<uint64_t>(o.row_stride),
                         rows.data());
  return XXH64(rows.data(), rows.size() * sizeof(uint64_t), static_cast<uint64_t>(o.rows));
}

struct Recording {
  std::unique_ptr<db::TraceReader> reader;
  std::vector<db::Event> events;   // events[seq]
  std::map<std::string, int> app;  // graph.txt: replays, nccl (graph-threads: launches, executed)
  std::string dir;
  std::string log;  // detrace record's output, the tracer's log lines included
};

// `env` (VAR=value ...) and `options` (detrace record's) are added to the command; `mode` is the
// app's (graph, graph-threads), `extra` its arguments after DIR.
void recordGraphApp(const testing::TempDir& tmp, Recording& r, const std::string& env = "",
                    const std::string& options = "", const std::string& mode = "graph",
                    const std::string& extra = "") {
  r.dir = tmp.file("out");
  std::filesystem::create_directories(r.dir);
  const std::string run = tmp.file("run");
  // Bounded: a hang (the unserialized modes do what CUDA's rules forbid) must fail, not stall.
  testing::ShellOutput o = testing::runShell(fmt::format(
      "{3} timeout -k 5 120 {0}/replay/detrace record -o {1} {4} -- {0}/tests/tracer_gpu_app {5} {2} {6}",
      DETRACE_BINARY_DIR, run, r.dir, env, options, mode, extra));
  ASSERT_EQ(o.status, 0) << o.out;
  r.log = o.out;
  std::ifstream info(r.dir + "/graph.txt");
  std::string key;
  int value = 0;
  while (info >> key >> value) r.app[key] = value;
  if (mode == "graph") {
    ASSERT_EQ(r.app["replays"], 4) << o.out;
  }
  if (mode == "graph-threads") {
    ASSERT_EQ(r.app["launches"], graph_app::kThreads * graph_app::kThreadLaunches) << o.out;
    ASSERT_EQ(r.app["executed"], r.app["launches"]) << o.out;
  }
  auto opened = db::Run::open(run);
  ASSERT_TRUE(opened.isOk()) << opened.status().message();
  auto reader = opened->openRank(opened->ranks()[0].rank);
  ASSERT_TRUE(reader.isOk()) << reader.status().message();
  r.reader = std::move(*reader);
  auto cursor = r.reader->events();
  ASSERT_TRUE(cursor.isOk());
  for (auto more = cursor->next(); more.isOk() && *more; more = cursor->next()) {
    ASSERT_EQ(cursor->event().seq, static_cast<int64_t>(r.events.size()));
    r.events.push_back(cursor->event());
  }
}

// The file (under the app's DIR) holding each operand's bytes after launch `replay`, by op kind.
std::string expectedFile(const std::string& op, const std::string& operand, int replay) {
  const std::string p = "replay" + std::to_string(replay) + "_";
  if (op == "cublasLtMatmul") {  // D1 = A X
    if (operand == "A") return "A";
    return p + (operand == "B" ? "X" : "D1");
  }
  if (op == "cublasGemmEx") {  // Y = W D1
    if (operand == "A") return "W";
    return p + (operand == "B" ? "D1" : "Y");
  }
  return p + (operand == "send" ? "Y" : "Z");  // Z = all-reduce of Y over one rank
}

// The *Via digests write where their cell points when they run (0: nowhere), and storeWords sets
// cells on a stream, more than one launch's worth too.
class ViaDigestTest : public testing::GpuTest {};

TEST_F(ViaDigestTest, WriteWhereTheirCellPointsWhenTheyRun) {
  using kernels::DigestSlot;
  using testing::DeviceBuffer;
  if (IsSkipped() || HasFatalFailure()) return;
  auto made = kernels::Digester::create();
  ASSERT_TRUE(made.isOk()) << made.status().message();
  const kernels::Digester& d = *made;
  const std::vector<unsigned char> host = randomBytes((3u << 20) + 64);
  DeviceBuffer buf(host.size()), cells(64 * 8), out(1 << 16 << 3), slots(8 * sizeof(DigestSlot));
  ASSERT_TRUE(buf.ok() && cells.ok() && out.ok() && slots.ok());
  buf.upload(host.data(), host.size());
  slots.poison(0);  // zeroed once, as DigestSlot's contract says
  cells.poison(0);
  auto cell = [&](int i) { return reinterpret_cast<const uint64_t*>(cells.get() + 8 * i); };
  auto setCell = [&](int i, uint64_t v) {
    const uint64_t* a[] = {cell(i)};
    ASSERT_TRUE(d.storeWords(a, &v, 1, nullptr).isOk());
  };
  auto word = [&](size_t i) {
    uint64_t v = 0;
    EXPECT_EQ(cudaMemcpy(&v, out.get() + 8 * i, 8, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  };
  const auto base = reinterpret_cast<CUdeviceptr>(buf.get());
  const uint64_t out_addr = reinterpret_cast<uint64_t>(out.get());
  // Whole buffers of every mode (one block, split over blocks through the slot) and alignment.
  int k = 0;
  for (uint64_t len : {0ull, 100ull, 4096ull, 65536ull + 1, (1ull << 20) + 3, 3ull << 20}) {
    for (uint64_t shift : {0ull, 4ull, 1ull}) {
      SCOPED_TRACE(fmt::format("len {} at +{}", len, shift));
      out.poison();
      setCell(1, out_addr + 8 * 100);  // this "replay" writes at word 100 + 7
      auto* slot = reinterpret_cast<DigestSlot*>(slots.get()) + (k++ % 8);
      ASSERT_TRUE(d.digestVia(base + shift, len, slot, cell(1), 7, nullptr).isOk());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(word(107), kernels::digestCpu(host.data() + shift, len));
      EXPECT_EQ(word(106), ~0ull) << "wrote outside its word";
      // A replay the tracer did not see: cell 0, nothing written, the slot left clean.
      out.poison();
      setCell(1, 0);
      ASSERT_TRUE(d.digestVia(base + shift, len, slot, cell(1), 7, nullptr).isOk());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(word(107), ~0ull);
      DigestSlot left{};
      ASSERT_EQ(cudaMemcpy(&left, slot, sizeof left, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(left.sum, 0u);
      EXPECT_EQ(left.done_chunks, 0u);
    }
  }
  // Rows: packed in warps, packed in blocks, odd strides and bases.
  struct RowCase {
    uint32_t rows;
    uint64_t row_bytes, stride, shift;
  };
  for (const RowCase& c : {RowCase{64, 1000, 1024, 0}, RowCase{37, 8192, 8196, 4},
                           RowCase{9, 65536, 65537, 1}, RowCase{3000, 768, 768, 0}}) {
    SCOPED_TRACE(fmt::format("{} rows of {} every {} at +{}", c.rows, c.row_bytes, c.stride, c.shift));
    out.poison();
    setCell(2, out_addr + 8 * 10);
    ASSERT_TRUE(d.digestRowsVia(base + c.shift, c.rows, c.row_bytes, c.stride, cell(2), 3, nullptr,
                                nullptr)
                    .isOk());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint64_t> cpu(c.rows), gpu(c.rows);
    kernels::digestRowsCpu(host.data() + c.shift, c.rows, c.row_bytes, c.stride, cpu.data());
    ASSERT_EQ(cudaMemcpy(gpu.data(), out.get() + 8 * 13, 8 * c.rows, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(gpu, cpu);
    EXPECT_EQ(word(12), ~0ull);
    EXPECT_EQ(word(13 + c.rows), ~0ull);
  }
  // storeWords: 40 words, two launches' worth.
  std::vector<const uint64_t*> addrs;
  std::vector<uint64_t> values;
  for (int i = 0; i < 40; ++i) {
    addrs.push_back(cell(20 + i));
    values.push_back(0x1000 + static_cast<uint64_t>(i) * 3);
  }
  ASSERT_TRUE(d.storeWords(addrs.data(), values.data(), 40, nullptr).isOk());
  std::vector<uint64_t> back(40);
  ASSERT_EQ(cudaMemcpy(back.data(), cells.get() + 8 * 20, 8 * 40, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, values);

  // digestManyVia, a request with a cell of its own (a weight digested on some replays only): a
  // row set and a buffer long enough to need its slot (many blocks) on the call's cell, another
  // such buffer on its own cell. With its own cell at 0 only that request writes nothing (and
  // leaves its slot clean); pointed like the call's, it writes its word too.
  const uint64_t w_len = (1ull << 20) + 16, w_shift = 1024;
  kernels::DigestRequest reqs[3];
  reqs[0].base = base;
  reqs[0].rows = 5;
  reqs[0].row_bytes = 1024;
  reqs[0].row_stride = 1024;
  reqs[0].out_offset = 0;
  reqs[1].base = base + 65536;
  reqs[1].bytes = w_len;
  reqs[1].slot = reinterpret_cast<DigestSlot*>(slots.get()) + 6;
  reqs[1].out_offset = 5;
  reqs[2].base = base + w_shift;
  reqs[2].bytes = w_len;
  reqs[2].slot = reinterpret_cast<DigestSlot*>(slots.get()) + 7;
  reqs[2].out_offset = 6;
  reqs[2].out_cell = cell(3);
  std::vector<uint64_t> rows(5);
  kernels::digestRowsCpu(host.data(), 5, 1024, 1024, rows.data());
  for (bool own_on : {false, true, false}) {
    SCOPED_TRACE(own_on ? "its own cell pointed like the call's" : "its own cell at 0");
    out.poison();
    setCell(2, out_addr + 8 * 200);
    setCell(3, own_on ? out_addr + 8 * 200 : 0);
    uint32_t launches = 0;
    ASSERT_TRUE(d.digestManyVia(reqs, 3, cell(2), nullptr, &launches).isOk());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(launches, 1u);
    for (int r = 0; r < 5; ++r) EXPECT_EQ(word(200 + r), rows[r]) << "row " << r;
    EXPECT_EQ(word(205), kernels::digestCpu(host.data() + 65536, w_len));
    EXPECT_EQ(word(206), own_on ? kernels::digestCpu(host.data() + w_shift, w_len) : ~0ull);
    EXPECT_EQ(word(207), ~0ull) << "wrote past the last request's word";
    DigestSlot left{};
    ASSERT_EQ(cudaMemcpy(&left, reqs[2].slot, sizeof left, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(left.sum, 0u);
    EXPECT_EQ(left.done_chunks, 0u);
  }
}

// Checks a recording of `tracer_gpu_app graph`: every replayed op's fingerprints equal the CPU
// twin's of that launch's bytes, placed among its own kernels, from one capture of the GEMMs (or,
// recaptured, one per launch) and one of the all-reduce.
void checkEveryReplay(Recording& r) {
  db::TraceReader& t = *r.reader;
  const int replays = r.app["replays"];
  const bool nccl = r.app["nccl"] == 1;
  const bool recaptured = r.app["recaptured"] == 1;
  if (!nccl) {
    std::printf(
        "note: libnccl.so.2 was not loadable or NCCL could not be captured; only the GEMMs "
        "are checked\n");
  }
  const size_t ops_per_replay = 2 + (nccl ? 1 : 0);

  std::vector<db::GraphOp> rows;
  ASSERT_TRUE(t.forEachGraphOp([&](const db::GraphOp& g) {
                 rows.push_back(g);
                 return Status::ok();
               }).isOk());
  ASSERT_EQ(rows.size(), static_cast<size_t>(replays) * ops_per_replay);

  std::map<std::string, std::set<int64_t>> templates;      // op name -> template seqs
  std::map<std::string, std::vector<uint64_t>> x_digests;  // per op: its first input, per replay
  std::map<std::string, int> checked;                      // op/operand -> operands checked
  int64_t last_comm_seq = -1;
  // Which of the app's launches a replayed op belongs to: its replay's number, or, recaptured
  // (each capture launched once, so every replay is its executable graph's first), a GEMM's
  // capture's place among the captures of its kind.
  std::map<int64_t, int> capture_index;  // a GEMM's template seq -> its capture's launch
  if (recaptured) {
    std::map<int64_t, std::set<int64_t>> by_kind;  // event name -> template seqs
    for (const db::GraphOp& g : rows) {
      const db::Event& e = r.events[static_cast<size_t>(g.seq)];
      if (e.kind == db::EventKind::kGemm) by_kind[e.name].insert(g.template_seq);
    }
    for (const auto& [name, seqs] : by_kind) {
      int i = 0;
      for (int64_t seq : seqs) capture_index[seq] = i++;
    }
  }
  for (const db::GraphOp& g : rows) {
    SCOPED_TRACE(fmt::format("replayed op at seq {} (replay {})", g.seq, g.replay));
    const db::Event& ev = r.events[static_cast<size_t>(g.seq)];
    const int launch = recaptured && ev.kind == db::EventKind::kGemm ? capture_index[g.template_seq]
                                                                      : static_cast<int>(g.replay);
    ASSERT_GE(g.seq, 0);
    ASSERT_LT(g.seq, static_cast<int64_t>(r.events.size()));
    ASSERT_GE(g.replay, 0);
    ASSERT_LT(g.replay, replays);
    const db::Event& e = r.events[static_cast<size_t>(g.seq)];
    std::string op;
    // The replayed op is a library op of its template's kind and details.
    ASSERT_GE(g.template_seq, 0) << "the captured call is in the trace";
    ASSERT_LT(g.template_seq, g.seq);
    const db::Event& tmpl = r.events[static_cast<size_t>(g.template_seq)];
    EXPECT_EQ(tmpl.kind, e.kind);
    if (e.kind == db::EventKind::kGemm) {
      auto gemm = t.gemm(g.seq);
      auto tgemm = t.gemm(g.template_seq);
      ASSERT_TRUE(gemm.isOk() && gemm->has_value() && tgemm.isOk() && tgemm->has_value());
      op = t.str((*gemm)->api);
      EXPECT_EQ((*gemm)->m, (*tgemm)->m);
      EXPECT_EQ((*gemm)->n, (*tgemm)->n);
      EXPECT_EQ((*gemm)->k, (*tgemm)->k);
      EXPECT_EQ((*gemm)->api, (*tgemm)->api);
      // Placed before its kernels: the graph's next events name it as their parent.
      int children = 0;
      for (size_t s = static_cast<size_t>(g.seq) + 1;
           s < r.events.size() && s < static_cast<size_t>(g.seq) + 64; ++s) {
        if (r.events[s].parent_seq != g.seq) continue;
        ++children;
        EXPECT_NE(r.events[s].graph_id, db::kUnset) << "a child replayed from the graph";
        EXPECT_EQ(r.events[s].correlation_id, e.correlation_id) << "the same graph launch";
      }
      EXPECT_GE(children, 1) << op << ": no kernel of the replay names it as parent";
    } else {
      ASSERT_EQ(e.kind, db::EventKind::kCollective);
      auto coll = t.collective(g.seq);
      auto tcoll = t.collective(g.template_seq);
      ASSERT_TRUE(coll.isOk() && coll->has_value() && tcoll.isOk() && tcoll->has_value());
      op = "AllReduce";
      EXPECT_EQ((*coll)->op, db::CollOp::kAllReduce);
      EXPECT_EQ((*coll)->comm_id, (*tcoll)->comm_id);
      EXPECT_EQ((*coll)->count, (*tcoll)->count);
      // Each replay is the communicator's next call: numbers after the captured call's, increasing.
      EXPECT_GT((*coll)->comm_seq, (*tcoll)->comm_seq);
      EXPECT_GT((*coll)->comm_seq, last_comm_seq);
      last_comm_seq = (*coll)->comm_seq;
    }
    templates[op].insert(g.template_seq);
    // The captured call itself has no fingerprints: what it saw was only ever the capture.
    auto tops = t.operands(g.template_seq);
    ASSERT_TRUE(tops.isOk());
    for (const db::Operand& o : *tops)
      EXPECT_FALSE(o.has_digest) << "template operand " << t.str(o.name);

    // This replay's fingerprints: every operand, whole and per row, equal to the CPU twin's.
    auto ops = t.operands(g.seq);
    ASSERT_TRUE(ops.isOk()) << ops.status().message();
    ASSERT_EQ(ops->size(), e.kind == db::EventKind::kGemm ? 3u : 2u) << op;
    for (const db::Operand& o : *ops) {
      const std::string name = t.str(o.name);
      const std::string file = expectedFile(op, name, launch);
      std::vector<uint8_t> bytes = readFile(r.dir + "/" + file + ".bin");
      ASSERT_FALSE(bytes.empty()) << file;
      ASSERT_EQ(o.bytes, static_cast<int64_t>(bytes.size())) << op << " " << name;
      ASSERT_TRUE(o.has_digest) << op << " " << name;
      // Rows too, but for a GEMM's A under the default --row-digests tokens (A: its whole digest).
      const bool whole_only = e.kind == db::EventKind::kGemm && name == "A";
      EXPECT_EQ(o.rows > 0, !whole_only) << op << " " << name << ": rows are fingerprinted too";
      std::vector<uint64_t> cpu_rows;
      EXPECT_EQ(o.digest, cpuDigest(o, bytes, cpu_rows)) << op << " " << name << " of " << file;
      EXPECT_EQ(o.row_digests, cpu_rows) << op << " " << name << " of " << file;
      if (name == "B" || name == "send") x_digests[op].push_back(o.digest);
      ++checked[op + " " + name];
    }
  }
  // One template per captured op, replayed `replays` times (or once each, recaptured before
  // every launch), each replay with its own data.
  const size_t gemm_captures = recaptured ? static_cast<size_t>(replays) : 1u;
  EXPECT_EQ(templates["cublasLtMatmul"].size(), gemm_captures);
  EXPECT_EQ(templates["cublasGemmEx"].size(), gemm_captures);
  EXPECT_EQ(templates["AllReduce"].size(), nccl ? 1u : 0u);
  for (const auto& [op, digests] : x_digests) {
    EXPECT_EQ(std::set<uint64_t>(digests.begin(), digests.end()).size(),
              static_cast<size_t>(replays))
        << op << ": the replays' inputs differ, so must their fingerprints";
  }
  for (const char* key : {"cublasLtMatmul A", "cublasLtMatmul B", "cublasLtMatmul D",
                          "cublasGemmEx A", "cublasGemmEx B", "cublasGemmEx D"}) {
    EXPECT_EQ(checked[key], replays) << key;
  }
  if (nccl) {
    EXPECT_EQ(checked["AllReduce send"], replays);
    EXPECT_EQ(checked["AllReduce recv"], replays);
  }

  // The app's own kernel before each GEMM, replayed from the graph, is no GEMM's child: not taken
  // for a kernel of the GEMM after it (a replayed GEMM's kernels are its call's graph nodes; no
  // digest of its comes before them).
  int markers = 0;
  for (const db::Event& e : r.events) {
    if (e.graph_id == db::kUnset || t.str(e.name).find("app_marker_kernel") == std::string::npos) {
      continue;
    }
    ++markers;
    const bool gemm_parent = e.parent_seq >= 0 && e.parent_seq < static_cast<int64_t>(r.events.size()) &&
                             r.events[static_cast<size_t>(e.parent_seq)].kind == db::EventKind::kGemm;
    EXPECT_FALSE(gemm_parent) << "the app's kernel at seq " << e.seq << " was taken for GEMM "
                              << e.parent_seq << "'s";
  }
  EXPECT_EQ(markers, 2 * replays) << "the app's kernels replayed from the graph";

  // The tracer's own kernels (digests, their destinations) are never events.
  for (const db::Event& e : r.events) {
    EXPECT_NE(t.str(e.name).rfind("detrace_", 0), 0u) << "event " << e.seq << " is the tracer's";
  }
  auto stats = t.stats();
  ASSERT_TRUE(stats.isOk());
  const int64_t launches = replays * (nccl ? 2 : 1);
  EXPECT_EQ((*stats)["graph_replays_fingerprinted"], launches);
  // The all-reduce's call may have been captured even where its graph failed (nccl 0).
  // A GEMM refused while captured (GRAPH_APP_REFUSED_GEMM) was captured too, and is never replayed.
  const int64_t refused = r.app["refused"] != 0 ? 1 : 0;
  const int64_t gemm_ops = 2 * static_cast<int64_t>(gemm_captures) + refused;
  EXPECT_GE((*stats)["graph_fingerprint_ops_captured"], gemm_ops + (nccl ? 1 : 0));
  EXPECT_LE((*stats)["graph_fingerprint_ops_captured"], gemm_ops + 1);
  EXPECT_EQ((*stats)["graph_fingerprint_ops_refused"], refused);
  EXPECT_EQ((*stats)["graph_replays_lost"], 0);
  EXPECT_EQ((*stats)["graph_replays_skipped_ring_full"], 0);
  EXPECT_EQ((*stats)["graph_replays_skipped_shared"], 0);
  EXPECT_EQ((*stats)["graph_replays_skipped_unsupported"], 0);
  if (nccl) {
    EXPECT_EQ((*stats)["fingerprints_skipped_graph_capture"], 0);
  }
  EXPECT_EQ((*stats)["fingerprints_lost"], 0);
  EXPECT_EQ((*stats)["tracer_slots_timed_out"], 0)
      << "the graphs' own kernels count to their records";
  EXPECT_EQ((*stats)["tracer_graph_ops"], static_cast<int64_t>(rows.size()));
  // The GEMMs' kernels are found by their graph node ids (their digests all come after them); only
  // the all-reduce, whose kernel NCCL may launch outside its call, is placed between its digests.
  EXPECT_EQ((*stats)["tracer_graph_ops_placed_by_count"], nccl ? replays : 0);
  EXPECT_EQ((*stats)["events_dropped"], 0);
  EXPECT_EQ((*stats)["fingerprints_skipped_ring_full"], 0);
  if (recaptured) {
    EXPECT_GE((*stats)["graph_captures_reclaimed"], 1) << "no destroyed graph's capture was reclaimed";
    // The last capture (after the first was reclaimed) took a cell and the weights' slots again.
    EXPECT_GE((*stats)["graph_pool_reused"], 3) << "no capture used reclaimed memory";
  }
}

TEST(TracerGraph, EveryReplayOfCapturedGemmsAndAllReduceHasItsOwnFingerprints) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  Recording r;
  ASSERT_NO_FATAL_FAILURE(recordGraphApp(tmp, r));
  ASSERT_EQ(r.app["recaptured"], 0);
  checkEveryReplay(r);
}

// A GEMM that cuBLAS refuses while the graph is captured (after the tracer put its input digests
// into the graph: it is in place on Y): the call stays in the trace, recorded as called, but no
// replay says it ran; the replays hold the same ops, placed and fingerprinted as without it.
TEST(TracerGraph, AGemmRefusedWhileCapturedIsNeverReplayed) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  Recording r;
  ASSERT_NO_FATAL_FAILURE(recordGraphApp(tmp, r, "GRAPH_APP_REFUSED_GEMM=1"));
  ASSERT_NE(r.app["refused"], 0) << r.log;
  int refused_calls = 0;  // GEMM events of the refused call's shape (n = kN / 2)
  for (const db::Event& e : r.events) {
    if (e.kind != db::EventKind::kGemm) continue;
    auto gemm = r.reader->gemm(e.seq);
    ASSERT_TRUE(gemm.isOk() && gemm->has_value());
    refused_calls += (*gemm)->n == graph_app::kN / 2;
  }
  EXPECT_EQ(refused_calls, 1) << "the refused call, once, and no replay of it";
  auto stats = r.reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["graph_fingerprint_ops_refused"], 1) << r.log;
  EXPECT_GE((*stats)["fingerprints_skipped_failed_call"], 1);
  checkEveryReplay(r);
}

// A program that destroys its graph and captures it again before every launch (700 ms apart):
// the destroyed captures are reclaimed a second after their graph went (their device cells and
// DigestSlots given back to the pool, their bookkeeping freed), and the last launch's capture,
// made after the first was reclaimed, takes its memory again; every launch's fingerprints still
// equal the CPU twin's.
TEST(TracerGraph, RecapturedGraphsGiveTheirMemoryBackAndKeepEveryReplaysFingerprints) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  Recording r;
  ASSERT_NO_FATAL_FAILURE(recordGraphApp(tmp, r, "GRAPH_APP_RECAPTURE_MS=700"));
  ASSERT_EQ(r.app["recaptured"], 1);
  checkEveryReplay(r);
}

// --graph-weights-every 2, with the app giving A and W new values before every launch: replays 0
// and 2 digest the weights (equal to the CPU twin's of that replay's bytes), replays 1 and 3 carry
// the digest of the replay before them (so not that of their own, different, weights), and the
// activations and outputs are every replay's own.
TEST(TracerGraph, WeightsDigestedOnEveryNthReplayOnly) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  Recording r;
  ASSERT_NO_FATAL_FAILURE(
      recordGraphApp(tmp, r, "GRAPH_APP_NEW_WEIGHTS=1", "--graph-weights-every 2"));
  db::TraceReader& t = *r.reader;
  EXPECT_EQ(t.metaValue("graph_weights_every"), "2");
  std::map<std::string, int> checked;
  ASSERT_TRUE(t.forEachGraphOp([&](const db::GraphOp& g) {
                 const db::Event& e = r.events[static_cast<size_t>(g.seq)];
                 if (e.kind != db::EventKind::kGemm) return Status::ok();
                 auto gemm = t.gemm(g.seq);
                 EXPECT_TRUE(gemm.isOk() && gemm->has_value());
                 if (!gemm.isOk() || !gemm->has_value()) return Status::ok();
                 const std::string op = t.str((*gemm)->api);
                 const int replay = static_cast<int>(g.replay);
                 auto ops = t.operands(g.seq);
                 EXPECT_TRUE(ops.isOk());
                 if (!ops.isOk()) return Status::ok();
                 for (const db::Operand& o : *ops) {
                   const std::string name = t.str(o.name);
                   SCOPED_TRACE(fmt::format("{} {} at replay {}", op, name, replay));
                   EXPECT_TRUE(o.has_digest);
                   std::vector<uint64_t> cpu_rows;
                   if (name != "A") {  // activations and outputs: this replay's own
                     std::vector<uint8_t> bytes = readFile(r.dir + "/" + expectedFile(op, name, replay) + ".bin");
                     EXPECT_EQ(o.digest, cpuDigest(o, bytes, cpu_rows));
                     EXPECT_EQ(o.row_digests, cpu_rows);
                     ++checked[op + " " + name];
                     continue;
                   }
                   const std::string weight = op == "cublasLtMatmul" ? "A" : "W";
                   auto file = [&](int k) {
                     return readFile(r.dir + "/replay" + std::to_string(k) + "_" + weight + ".bin");
                   };
                   EXPECT_EQ(o.digest, cpuDigest(o, file(replay - replay % 2), cpu_rows))
                       << "the weights' digest of the last sampled replay";
                   if (replay % 2 == 1) {
                     EXPECT_NE(o.digest, cpuDigest(o, file(replay), cpu_rows))
                         << "an unsampled replay's weights were digested";
                   }
                   ++checked[op + " " + name];
                 }
                 return Status::ok();
               }).isOk());
  for (const char* key : {"cublasLtMatmul A", "cublasLtMatmul B", "cublasLtMatmul D",
                          "cublasGemmEx A", "cublasGemmEx B", "cublasGemmEx D"}) {
    EXPECT_EQ(checked[key], r.app["replays"]) << key;
  }
  auto stats = t.stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["graph_weight_digests_carried"], 2 * r.app["replays"] / 2);
  EXPECT_EQ((*stats)["graph_weight_digests_missing"], 0);
  EXPECT_EQ((*stats)["graph_replays_lost"], 0);
}

// ---- one executable graph launched from two threads at once (`tracer_gpu_app graph-threads`) ----

std::vector<uint8_t> floatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<float> readFloats(const std::string& path) {
  std::vector<uint8_t> b = readFile(path);
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), v.size() * sizeof(float));
  return v;
}

// C (rows x cols, column major) = L (rows x inner) R (inner x cols), exact for the app's integers.
std::vector<float> matmul(const std::vector<float>& l, const std::vector<float>& r, int rows,
                          int inner, int cols) {
  std::vector<double> c(static_cast<size_t>(rows) * cols, 0.0);
  for (int j = 0; j < cols; ++j) {
    for (int k = 0; k < inner; ++k) {
      const double rk = r[static_cast<size_t>(k) + static_cast<size_t>(j) * inner];
      if (rk == 0.0) continue;
      const float* lk = &l[static_cast<size_t>(k) * rows];
      double* cj = &c[static_cast<size_t>(j) * rows];
      for (int i = 0; i < rows; ++i) cj[i] += static_cast<double>(lk[i]) * rk;
    }
  }
  return std::vector<float>(c.begin(), c.end());
}

// What the graph's k-th execution read and wrote, as bytes.
struct Execution {
  std::vector<uint8_t> x, d1, y;
};

Execution execution(int k, const std::vector<float>& a, const std::vector<float>& w) {
  using namespace graph_app;
  std::vector<float> x(static_cast<size_t>(kK) * kN);
  for (size_t i = 0; i < x.size(); ++i) x[i] = threadsX(static_cast<int>(i), k);
  std::vector<float> d1 = matmul(a, x, kM, kK, kN);
  std::vector<float> y = matmul(w, d1, kM2, kM, kN);
  return {floatBytes(x), floatBytes(d1), floatBytes(y)};
}

// The graph stats of a recording, one line each (printed by the threaded tests: one GPU run must
// say enough to diagnose them).
std::string graphStats(const std::map<std::string, int64_t>& stats) {
  std::string out;
  for (const auto& [name, value] : stats) {
    if (name.rfind("graph_", 0) == 0 || name == "cupti_callbacks_repeated") {
      out += fmt::format("  {} = {}\n", name, value);
    }
  }
  return out;
}

// "0-3 7 9-12": a set of replay numbers as runs (a failing GPU run prints which launches had what).
std::string runsOf(const std::set<int64_t>& numbers) {
  std::string out;
  for (auto it = numbers.begin(); it != numbers.end();) {
    int64_t first = *it, last = first;
    while (++it != numbers.end() && *it == last + 1) last = *it;
    out += out.empty() ? "" : " ";
    out += first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last);
  }
  return out;
}

// Checks a graph-threads recording: every launch given fingerprints has both GEMMs' operands
// equal to the CPU's of one execution k (found by X's digest: X spells k), each k at most once;
// every other launch has no operands at all. `all_recorded`: every launch is in the trace (else
// only those made while recording was on). Returns the launches given fingerprints; `which`, when
// given, says which replays were recorded and which had fingerprints.
int checkThreadedLaunches(const Recording& r, bool all_recorded = true, std::string* which = nullptr) {
  db::TraceReader& t = *r.reader;
  const int launches = r.app.at("launches");
  const std::vector<float> a = readFloats(r.dir + "/A.bin"), w = readFloats(r.dir + "/W.bin");
  EXPECT_EQ(a.size(), static_cast<size_t>(graph_app::kM) * graph_app::kK);
  EXPECT_EQ(w.size(), static_cast<size_t>(graph_app::kM2) * graph_app::kM);
  const std::vector<uint8_t> a_bytes = floatBytes(a), w_bytes = floatBytes(w);
  std::vector<Execution> runs;
  for (int k = 0; k < launches; ++k) runs.push_back(execution(k, a, w));
  std::map<uint64_t, int> k_of_x;  // X's digest -> k (X's layout is the same at every launch)

  std::vector<db::GraphOp> rows;
  EXPECT_TRUE(t.forEachGraphOp([&](const db::GraphOp& g) {
                 rows.push_back(g);
                 return Status::ok();
               }).isOk());
  std::set<int64_t> recorded;
  for (const db::GraphOp& g : rows) recorded.insert(g.replay);
  EXPECT_EQ(rows.size(), recorded.size() * 2) << "two replayed GEMMs per launch";
  if (all_recorded) {
    EXPECT_EQ(recorded.size(), static_cast<size_t>(launches));
  }
  // Per launch (its replay number): the GEMMs' operands, by op and name.
  std::map<int64_t, std::map<std::string, db::Operand>> by_launch;
  for (const db::GraphOp& g : rows) {
    auto gemm = t.gemm(g.seq);
    EXPECT_TRUE(gemm.isOk() && gemm->has_value()) << "replayed op at seq " << g.seq;
    if (!gemm.isOk() || !gemm->has_value()) continue;
    const std::string op = t.str((*gemm)->api);
    auto ops = t.operands(g.seq);
    EXPECT_TRUE(ops.isOk());
    if (!ops.isOk()) continue;
    for (const db::Operand& o : *ops) by_launch[g.replay][op + " " + t.str(o.name)] = o;
  }
  std::set<int> seen;
  int fingerprinted = 0;
  // Mismatches are counted and the first few described: one failure per operand of 200 launches
  // would bury the rest of the output.
  int mismatches = 0;
  std::string described;
  auto mismatch = [&](int64_t launch, const std::string& what) {
    if (++mismatches <= 8) described += fmt::format("  launch {}: {}\n", launch, what);
  };
  for (const auto& [replay, operands] : by_launch) {
    if (operands.size() != 6u) mismatch(replay, fmt::format("{} operands, not 6 (both GEMMs')", operands.size()));
    auto find = [&](const char* key) -> const db::Operand* {
      auto it = operands.find(key);
      return it == operands.end() || !it->second.has_digest ? nullptr : &it->second;
    };
    const db::Operand* x = find("cublasLtMatmul B");
    if (x == nullptr) {
      mismatch(replay, "operands without X's digest");
      continue;
    }
    std::vector<uint64_t> cpu_rows;
    if (k_of_x.empty()) {
      for (int c = 0; c < launches; ++c) k_of_x[cpuDigest(*x, runs[static_cast<size_t>(c)].x, cpu_rows)] = c;
      EXPECT_EQ(k_of_x.size(), static_cast<size_t>(launches)) << "every execution's X differs";
    }
    auto found = k_of_x.find(x->digest);
    if (found == k_of_x.end()) {
      mismatch(replay, "X's digest is no execution's X");
      continue;
    }
    const int k = found->second;
    if (!seen.insert(k).second) mismatch(replay, fmt::format("execution {}'s X given to two launches", k));
    ++fingerprinted;
    const Execution& e = runs[static_cast<size_t>(k)];
    const struct {
      const char* key;
      const std::vector<uint8_t>& bytes;
    } want[] = {{"cublasLtMatmul A", a_bytes}, {"cublasLtMatmul B", e.x},
                {"cublasLtMatmul D", e.d1},     {"cublasGemmEx A", w_bytes},
                {"cublasGemmEx B", e.d1},       {"cublasGemmEx D", e.y}};
    for (const auto& [key, bytes] : want) {
      const db::Operand* o = find(key);
      if (o == nullptr) {
        mismatch(replay, fmt::format("{} has no digest", key));
        continue;
      }
      const uint64_t want_digest = cpuDigest(*o, bytes, cpu_rows);
      if (o->digest != want_digest || o->row_digests != cpu_rows) {
        mismatch(replay, fmt::format("{} is not execution {}'s", key, k));
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "launches whose fingerprints are not one execution's:\n" << described;
  // Each recorded launch's replayed GEMMs own kernels of its graph, of the same launch (a launch
  // recorded twice, or one whose records went to another, would leave one without), unless CUPTI
  // dropped records, which says so.
  std::set<int64_t> without_kernels;
  for (const db::GraphOp& g : rows) {
    bool owns = false;
    const db::Event& op = r.events[static_cast<size_t>(g.seq)];
    for (size_t s = static_cast<size_t>(g.seq) + 1; !owns && s < r.events.size() && s < static_cast<size_t>(g.seq) + 64; ++s) {
      owns = r.events[s].parent_seq == g.seq && r.events[s].correlation_id == op.correlation_id;
    }
    if (!owns) without_kernels.insert(g.replay);
  }
  auto stats = t.stats();
  EXPECT_TRUE(stats.isOk());
  const bool records_dropped =
      stats.isOk() && ((*stats)["cupti_records_dropped"] > 0 || (*stats)["cupti_buffers_refused"] > 0);
  if (!records_dropped) {
    EXPECT_TRUE(without_kernels.empty()) << "replays whose GEMMs own no kernel: " << runsOf(without_kernels);
  }
  if (which != nullptr) {
    std::set<int64_t> with;
    for (const auto& entry : by_launch) with.insert(entry.first);
    *which = fmt::format("replays recorded: {}\nreplays with fingerprints: {}", runsOf(recorded), runsOf(with));
  }
  return fingerprinted;
}

// Two threads take turns at one executable graph (a mutex around each launch call, as CUDA's
// rules for one graph object ask), 100 launches each, each thread on its own stream: every launch
// gets the fingerprints of its own execution (ordered across the streams by the last launch's
// end), and a launch never waits for the other thread's (its launch call, exit callback
// included, has returned before the mutex lets the other one in).
// A run of `tracer_gpu_app graph-threads DIR how` whose threads take turns, as recorded.
struct TurnsRun {
  testing::TempDir tmp;
  Recording r;
  int launches = 0;
  int fingerprinted = 0;  // launches with one execution's fingerprints (checkThreadedLaunches)
  std::map<std::string, int64_t> stats;
  std::string which;  // checkThreadedLaunches's
};

// Records the run and checks what holds whenever the threads take turns: CUDA never overlapped
// two executions, and every launch with fingerprints has its own execution's. Prints the graph
// stats (one GPU run must say enough to diagnose a failure).
void recordTurns(const std::string& how, bool all_recorded, TurnsRun& run) {
  ASSERT_NO_FATAL_FAILURE(recordGraphApp(run.tmp, run.r, "", "", "graph-threads", how));
  run.launches = run.r.app["launches"];
  EXPECT_EQ(run.r.app["overlapping_executions"], 0) << "CUDA orders one graph's executions";
  run.fingerprinted = checkThreadedLaunches(run.r, all_recorded, &run.which);
  auto stats = run.r.reader->stats();
  ASSERT_TRUE(stats.isOk());
  run.stats = std::move(*stats);
  std::printf("graph stats:\n%s", graphStats(run.stats).c_str());
}

TEST(TracerGraph, TwoThreadsTakingTurnsAtOneGraphKeepEachLaunchsFingerprints) {
  DETRACE_REQUIRE_GPU();
  TurnsRun run;
  ASSERT_NO_FATAL_FAILURE(recordTurns("serialized", /*all_recorded=*/true, run));
  EXPECT_EQ(run.fingerprinted, run.launches);
  EXPECT_EQ(run.stats["graph_replays_fingerprinted"], run.launches);
  EXPECT_EQ(run.stats["graph_replays_waited"], 0);
  EXPECT_EQ(run.stats["graph_replays_skipped_overlap"], 0);
  EXPECT_EQ(run.stats["graph_replays_lost"], 0);
  EXPECT_EQ(run.stats["graph_replays_skipped_ring_full"], 0);
  if (HasFailure()) std::printf("detrace record said:\n%s\n", run.r.log.c_str());
}

// As above, with a cudaDeviceReset right after the last launch: the launches whose results the
// tracer still held (it writes them once their ops are placed, up to half a second later) are
// read out as the context is torn down and written after it, none lost.
TEST(TracerGraph, AResetRightAfterTheLaunchesKeepsTheirFingerprints) {
  DETRACE_REQUIRE_GPU();
  TurnsRun run;
  ASSERT_NO_FATAL_FAILURE(recordTurns("serialized-reset", /*all_recorded=*/true, run));
  EXPECT_EQ(run.fingerprinted, run.launches);
  EXPECT_EQ(run.stats["graph_replays_fingerprinted"], run.launches);
  EXPECT_EQ(run.stats["graph_replays_lost"], 0);
  EXPECT_GT(run.stats["graph_replays_settled_at_teardown"], 0) << "no launch was left for the reset";
  if (HasFailure()) std::printf("detrace record said:\n%s\n", run.r.log.c_str());
}

// Two threads launching one executable graph with no order between their launch calls, which
// CUDA's rules forbid but a program may do: whatever the calls' overlaps, no launch is given
// another execution's fingerprints; a launch that met an open one waited for it or, past the
// wait (`wait_us`; 0: never waits), gave that one's results and its graph's later ones up.
void checkUnserializedLaunches(const std::string& wait_us) {
  testing::TempDir tmp;
  Recording r;
  const std::string env = wait_us.empty() ? "" : "DETRACE_DIAG_GRAPH_LAUNCH_WAIT_US=" + wait_us;
  ASSERT_NO_FATAL_FAILURE(recordGraphApp(tmp, r, env, "", "graph-threads"));
  if (r.app["overlapping_executions"] > 0) {
    GTEST_SKIP() << "CUDA ran " << r.app["overlapping_executions"]
                 << " executions of the graph at the same time as another (unserialized launch "
                    "calls are undefined behaviour): nothing here says anything of the tracer";
  }
  const int launches = r.app["launches"];
  const int fingerprinted = checkThreadedLaunches(r);
  auto stats = r.reader->stats();
  ASSERT_TRUE(stats.isOk());
  std::printf("graph stats:\n%s", graphStats(*stats).c_str());
  const int64_t begun = (*stats)["graph_replays_fingerprinted"];
  const int64_t overlapped = (*stats)["graph_replays_skipped_overlap"];
  const int64_t lost = (*stats)["graph_replays_lost"];
  EXPECT_EQ(begun + overlapped, launches) << "every launch either began results or was turned away";
  EXPECT_EQ(fingerprinted, begun - lost) << "the launches given up are those counted lost";
  EXPECT_LE(lost, 1) << "only the launch open at the first overlap past the wait";
  EXPECT_EQ(overlapped > 0, lost == 1) << "an overlap past the wait gives the open launch up";
  // The first kStaggerLaunches launches come before the threads' calls can overlap: results
  // were given, so "never mixed" was checked on something.
  EXPECT_GE(fingerprinted, graph_app::kStaggerLaunches);
  if (wait_us == "0") {
    EXPECT_EQ((*stats)["graph_replays_waited"], 0);
  }
  std::printf("note: %d of %d launches fingerprinted, %lld waited, %lld turned away\n",
              fingerprinted, launches, static_cast<long long>((*stats)["graph_replays_waited"]),
              static_cast<long long>(overlapped));
  if (::testing::Test::HasFailure()) std::printf("detrace record said:\n%s\n", r.log.c_str());
}

// Two threads taking turns at one graph, each on its own stream, while the recording is stopped
// and started three times (through the control socket, as `detrace attach` does): the launches
// made while paused and those in progress at a switch stay ordered (the graph launch callbacks
// stay on), so every launch recorded with fingerprints carries its own execution's, and none is
// given up: no launch's end goes unseen, and the graphs' fingerprints never stop.
TEST(TracerGraph, LaunchesAcrossStopsAndStartsKeepTheirOwnFingerprints) {
  DETRACE_REQUIRE_GPU();
  TurnsRun run;
  ASSERT_NO_FATAL_FAILURE(recordTurns("switching", /*all_recorded=*/false, run));
  EXPECT_GT(run.fingerprinted, 0);
  EXPECT_LT(run.fingerprinted, run.launches) << "some launches were made while paused";
  EXPECT_EQ(run.stats["graph_replays_fingerprinted"], run.fingerprinted);
  EXPECT_EQ(run.stats["graph_replays_lost"], 0);
  EXPECT_EQ(run.stats["graph_replays_skipped_overlap"], 0);
  EXPECT_EQ(run.r.log.find("get no more fingerprints"), std::string::npos) << "graph fingerprints stopped";
  std::printf("note: %d of %d launches fingerprinted\n", run.fingerprinted, run.launches);
  if (size_t at = run.r.log.find("switches were answered"); at != std::string::npos) {
    std::printf("note: %s\n", run.r.log.substr(at, run.r.log.find('\n', at) - at).c_str());
  }
  std::printf("%s\n", run.which.c_str());
  if (HasFailure()) std::printf("detrace record said:\n%s\n", run.r.log.c_str());
}

// A graph launched with one of its kernel nodes disabled for a while (cudaGraphNodeSetEnabled):
// a disabled node gives no record, so the launches then wait for one record fewer. Had the count
// stayed, each would have waited out its timeout; had it not come back on re-enabling, the
// kernel's records would have gone unmatched.
void checkDisabledNodes(bool before_start) {
  testing::TempDir tmp;
  Recording r;
  ASSERT_NO_FATAL_FAILURE(recordGraphApp(tmp, r, "", before_start ? "--capture meta --paused" : "--capture meta",
                                         "graph-disabled", before_start ? "before-start" : ""));
  const int node1 = before_start ? 3 : 6;
  ASSERT_EQ(r.app["node0"], 9) << r.log;
  ASSERT_EQ(r.app["node1"], node1) << "the GPU ran the disabled node:\n" << r.log;
  ASSERT_EQ(r.app["node2"], 9) << r.log;
  std::map<int, int> by_node;
  for (const db::Event& e : r.events) {
    if (e.kind != db::EventKind::kKernel) continue;
    const std::string name = r.reader->str(e.name);
    for (int i = 0; i < 3; ++i) {
      if (name.find(fmt::format("graph_node<{}>", i)) != std::string::npos) ++by_node[i];
    }
  }
  EXPECT_EQ(by_node[0], 9) << r.log;
  EXPECT_EQ(by_node[1], node1) << r.log;
  EXPECT_EQ(by_node[2], 9) << r.log;
  auto stats = r.reader->stats();
  ASSERT_TRUE(stats.isOk());
  // A launch waiting for a record its graph no longer gives is written at its timeout, or
  // incomplete at the exit's flush (this program ends well within the timeout).
  EXPECT_EQ((*stats)["tracer_slots_timed_out"], 0) << "a launch waited for a record its graph no longer gives";
  EXPECT_EQ((*stats)["tracer_slots_incomplete_at_exit"], 0) << "a launch waited for a record its graph no longer gives";
  EXPECT_EQ((*stats)["tracer_activities_unmatched"], 0);
  EXPECT_EQ((*stats)["tracer_activities_late"], 0);
  EXPECT_EQ((*stats)["tracer_graph_launches_varying"], 0) << "every launch had a count";
}

TEST(TracerGraph, DisabledNodesAreFollowedInTheRecordCount) {
  DETRACE_REQUIRE_GPU();
  checkDisabledNodes(/*before_start=*/false);
}

// The node disabled while the recording was paused (the callbacks were off): its state is read
// at the start, so the launches made with it disabled, then enabled, then disabled again each
// wait for the records they give.
TEST(TracerGraph, NodesDisabledBeforeTheStartAreReadAtIt) {
  DETRACE_REQUIRE_GPU();
  checkDisabledNodes(/*before_start=*/true);
}

// A node of the GEMMs' graph disabled before its third launch (the app's own kernel; the tracer
// cannot tell it from a captured GEMM's): from then on that graph's launches are recorded without
// replayed GEMMs (their digests would describe outputs a disabled kernel never made), the
// all-reduce's graph keeps all of its, and no launch waits for a record that does not come.
TEST(TracerGraph, AGraphWithADisabledNodeIsNoLongerReplayedWithFingerprints) {
  DETRACE_REQUIRE_GPU();
  testing::TempDir tmp;
  Recording r;
  ASSERT_NO_FATAL_FAILURE(recordGraphApp(tmp, r, "GRAPH_APP_DISABLE_MARKER=2"));
  ASSERT_EQ(r.app["disabled_at"], 2) << r.log;
  std::map<db::EventKind, std::vector<int64_t>> replays;  // kind -> replay numbers
  ASSERT_TRUE(r.reader->forEachGraphOp([&](const db::GraphOp& g) {
                     replays[r.events[static_cast<size_t>(g.seq)].kind].push_back(g.replay);
                     return Status::ok();
                   }).isOk());
  EXPECT_EQ(replays[db::EventKind::kGemm], (std::vector<int64_t>{0, 0, 1, 1}))
      << "two GEMMs in each of the two launches before the node was disabled";
  if (r.app["nccl"] == 1) {
    EXPECT_EQ(replays[db::EventKind::kCollective], (std::vector<int64_t>{0, 1, 2, 3}));
  }
  EXPECT_NE(r.log.find("had a node disabled"), std::string::npos) << r.log;
  auto stats = r.reader->stats();
  ASSERT_TRUE(stats.isOk());
  EXPECT_EQ((*stats)["tracer_slots_timed_out"], 0) << r.log;
  EXPECT_EQ((*stats)["tracer_slots_incomplete_at_exit"], 0) << r.log;
  EXPECT_EQ((*stats)["tracer_activities_unmatched"], 0) << r.log;
}

TEST(TracerGraph, UnserializedLaunchesOfOneGraphNeverMixFingerprints) {
  DETRACE_REQUIRE_GPU();
  checkUnserializedLaunches("");
}

TEST(TracerGraph, UnserializedLaunchesWithNoWaitGiveUpResultsAndNeverMixThem) {
  DETRACE_REQUIRE_GPU();
  checkUnserializedLaunches("0");
}

}  // namespace
}  // namespace detrace
