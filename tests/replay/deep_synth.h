// Synthetic runs with deep window records (what `detrace record --deep WINDOW` writes) for the deep
// diff, golden and bisect tests. A program is simulated as memory: each allocation holds a digest,
// a launch mixes the digests of everything it reaches into the allocations it writes, and a racy
// launch writes something else in run B. So divergence starts where a test plants it and spreads
// through the launches that read diverged memory, the way it does on a GPU.
//
// A launch is a raw kernel, or a GEMM (a cublasLtMatmul library op with A, B and D operands, as
// digest mode records them) that launches its kernel. Launches in [deep_from, deep_to) get deep
// records: one target per distinct allocation their parameters point into (args comma-joined),
// its digest before (role input) and after (role output) the launch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "detrace/db/run.h"
#include "detrace/db/writer.h"
#include "synth_mix.h"

namespace detrace::testing::deep {

struct Param {
  int alloc = 0;
  std::string arg;  // "arg0", "arg3+8"
  bool writes = false;
};

struct Launch {
  std::string kernel;
  std::vector<Param> params;  // a GEMM: A, B (read) and D (written), in that order
  bool gemm = false;
  bool racy = false;  // writes other bytes in run B
  std::string range;  // the NVTX range open around it ("" none)
};

struct Program {
  std::vector<int64_t> allocs;  // sizes in bytes
  std::vector<Launch> launches;
};

struct RunSpec {
  bool b = false;  // the second run: racy launches differ, allocations sit elsewhere
  int64_t deep_from = 0, deep_to = 0;  // launches recorded deep; empty: a digest-level run
  std::string window;                  // the deep_window meta ("" none)
  uint64_t seed = 1;                   // the program's input
  std::map<int, int64_t> sizes;        // allocation sizes that differ in this run
};

// The memory of one simulated run.
class Memory {
 public:
  Memory(const Program& p, const RunSpec& s) : p_(p), s_(s) {
    for (size_t i = 0; i < p.allocs.size(); ++i) state_.push_back(mix(s.seed, i));  // zero-filled
  }
  uint64_t at(int alloc) const { return state_[static_cast<size_t>(alloc)]; }
  int64_t bytes(int alloc) const {
    auto it = s_.sizes.find(alloc);
    return it != s_.sizes.end() ? it->second : p_.allocs[static_cast<size_t>(alloc)];
  }
  int64_t address(int alloc) const {
    return 0x7f0000000000 + alloc * (int64_t{1} << 24) + (s_.b ? 0x100000 : 0);
  }
  void run(const Launch& l) {
    uint64_t h = std::hash<std::string>{}(l.kernel);
    for (const Param& p : l.params) h = mix(h, at(p.alloc));
    for (const Param& p : l.params) {
      if (p.writes)
        state_[static_cast<size_t>(p.alloc)] = mix(at(p.alloc), h) ^ (l.racy && s_.b ? 0xbad : 0);
    }
  }

 private:
  const Program& p_;
  const RunSpec& s_;
  std::vector<uint64_t> state_;
};

// The distinct allocations a launch reaches, in first-parameter order, with their args.
inline std::vector<std::pair<int, std::string>> targetsOf(const Launch& l) {
  std::vector<std::pair<int, std::string>> out;
  for (const Param& p : l.params) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const auto& t) { return t.first == p.alloc; });
    if (it == out.end()) {
      out.emplace_back(p.alloc, p.arg);
    } else {
      it->second += "," + p.arg;
    }
  }
  return out;
}

class RunWriter {
 public:
  RunWriter(db::TraceWriter& w, const Program& p, const RunSpec& s)
      : w_(w), p_(p), s_(s), mem_(p, s) {}

  void write() {
    for (size_t i = 0; i < p_.launches.size(); ++i) launch(p_.launches[i], static_cast<int64_t>(i));
    range("");
    if (!s_.window.empty()) w_.setMeta("deep_window", s_.window);
  }

 private:
  void launch(const Launch& l, int64_t index) {
    range(l.range);
    bool deep = index >= s_.deep_from && index < s_.deep_to;
    std::vector<uint64_t> pre = digests(l);
    mem_.run(l);
    int64_t parent = l.gemm ? gemm(l, pre) : -1;
    db::Event e;
    e.kind = db::EventKind::kKernel;
    e.name = w_.intern(l.kernel);
    e.stream = w_.stream(0x10, 0);
    e.device = 0;
    e.parent_seq = parent;
    e.has_launch = true;
    e.launch.grid = {128, 1, 1};
    e.launch.block = {256, 1, 1};
    int64_t seq = *w_.append(e);
    if (deep) deepRecords(l, seq, pre);
  }

  std::vector<uint64_t> digests(const Launch& l) const {
    std::vector<uint64_t> out;
    for (const auto& [alloc, args] : targetsOf(l)) out.push_back(mem_.at(alloc));
    return out;
  }

  void operand(int64_t seq, int32_t slot, const std::string& name, db::OperandRole role, int alloc,
               uint64_t digest) {
    db::Operand o;
    o.seq = seq;
    o.slot = slot;
    o.name = w_.intern(name);
    o.role = role;
    o.address = mem_.address(alloc);
    o.bytes = mem_.bytes(alloc);
    o.has_digest = true;
    o.digest = mix(digest, static_cast<uint64_t>(o.bytes));  // a digest covers the whole allocation
    w_.appendOperand(std::move(o));
  }

  void deepRecords(const Launch& l, int64_t seq, const std::vector<uint64_t>& pre) {
    std::vector<std::pair<int, std::string>> targets = targetsOf(l);
    for (size_t t = 0; t < targets.size(); ++t) {
      const auto& [alloc, args] = targets[t];
      operand(seq, static_cast<int32_t>(t), args, db::OperandRole::kInput, alloc, pre[t]);
      operand(seq, static_cast<int32_t>(t), args, db::OperandRole::kOutput, alloc, mem_.at(alloc));
    }
  }

  // A cublasLtMatmul with its A, B (before) and D (after) digests, as digest mode records them.
  int64_t gemm(const Launch& l, const std::vector<uint64_t>& pre) {
    db::Event e;
    e.kind = db::EventKind::kGemm;
    e.name = w_.intern("cublasLtMatmul");
    e.stream = w_.stream(0x10, 0);
    e.device = 0;
    db::Gemm g;
    g.api = e.name;
    g.m = 1024;
    g.n = 8;
    g.k = 1024;
    g.a_dtype = g.b_dtype = g.c_dtype = g.d_dtype = db::DType::kBF16;
    g.algo_id = 6;
    int64_t seq = *w_.appendGemm(e, g);
    operand(seq, 0, "A", db::OperandRole::kInput, l.params[0].alloc, pre[0]);
    operand(seq, 1, "B", db::OperandRole::kInput, l.params[1].alloc, pre[1]);
    operand(seq, 3, "D", db::OperandRole::kOutput, l.params[2].alloc, mem_.at(l.params[2].alloc));
    return seq;
  }

  void range(const std::string& text) {
    if (text == open_) return;
    if (!open_.empty()) marker(open_, db::MarkerKind::kRangeEnd);
    if (!text.empty()) marker(text, db::MarkerKind::kRangeStart);
    open_ = text;
  }

  void marker(const std::string& text, db::MarkerKind kind) {
    db::Event e;
    e.kind = db::EventKind::kMarker;
    e.name = w_.intern(text);
    db::Marker m;
    m.marker_kind = kind;
    (void)w_.appendMarker(e, m);
  }

  db::TraceWriter& w_;
  const Program& p_;
  const RunSpec& s_;
  Memory mem_;
  std::string open_;
};

// Writes run `spec` of `program` as a one-rank run directory `dir`.
inline Status writeRun(const std::string& dir, const Program& program, const RunSpec& spec) {
  std::filesystem::create_directories(dir);
  db::RunManifest manifest;
  manifest.tool_version = "synthetic";
  manifest.command = {"python", "toy.py"};
  manifest.host = "synthetic";
  manifest.exit_code = 0;
  manifest.options = {{"capture", "digest"}};
  if (!spec.window.empty()) manifest.options["deep"] = spec.window;
  DETRACE_RETURN_IF_ERROR(db::writeManifest(dir, manifest));
  db::WriterOptions options;
  options.overwrite = true;
  options.policy = db::OverflowPolicy::kBlock;
  DETRACE_ASSIGN_OR_RETURN(auto w, db::TraceWriter::create(dir + "/proc-100.dtrace", options));
  w->setRank({0, 1, 0, 0, 100, "synthetic", "synthetic GPU", ""});
  RunWriter(*w, program, spec).write();
  return w->close();
}

// The toy layer of the golden and bisect tests: an embedding, a GEMM (library op 0), an rmsnorm,
// the planted racy reduction (three allocations: y through arg0 and arg3+8, the weights, and the
// 8 MiB partial sums it writes through arg2), a residual add, a second GEMM (library op 1) and a
// softmax. Launches 1-4 (ops:0:1: op 0's kernel up to the raw kernels before op 1) are the deep
// window of the golden pair.
inline Program toyLayer() {
  enum { kW, kX, kH, kY, kPartial };
  Program p;
  p.allocs = {int64_t{64} << 20, 4096, 4096, 4096, int64_t{8} << 20};
  auto in = [](int alloc, const char* arg) { return Param{alloc, arg, false}; };
  auto out = [](int alloc, const char* arg) { return Param{alloc, arg, true}; };
  p.launches = {
      {"embedding_kernel", {in(kW, "arg0"), out(kX, "arg1")}, false, false, "layer 0"},
      {"sm90_gemm_kernel",
       {in(kW, "arg0"), in(kX, "arg1"), out(kH, "arg2")},
       true,
       false,
       "layer 0"},
      {"rmsnorm_kernel", {in(kH, "arg0"), out(kY, "arg1")}, false, false, "layer 1"},
      {"planted_racy_reduce",
       {in(kY, "arg0"), in(kW, "arg1"), out(kPartial, "arg2"), in(kY, "arg3+8")},
       false,
       true,
       "layer 1"},
      {"add_residual",
       {in(kPartial, "arg0"), in(kX, "arg1"), out(kX, "arg2")},
       false,
       false,
       "layer 1"},
      {"sm90_gemm_kernel",
       {in(kW, "arg0"), in(kX, "arg1"), out(kH, "arg2")},
       true,
       false,
       "layer 1"},
      {"softmax_kernel", {in(kH, "arg0"), out(kY, "arg1")}, false, false, "layer 1"},
  };
  return p;
}

}  // namespace detrace::testing::deep
