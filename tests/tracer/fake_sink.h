// An in-memory EventSink for the reorder buffer's CPU tests: every row it was given, in order,
// numbered like the writer numbers them, and the graph_ops rows; `capacity` refuses appends beyond
// it (a full writer queue).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "detrace/tracer/reorder_buffer.h"

namespace detrace::testing {

struct FakeSink : tracer::EventSink {
  struct Row {
    db::Event e;
    std::optional<db::Collective> coll;
    std::optional<db::Gemm> gemm;
    std::optional<db::Marker> marker = {};
  };
  std::vector<Row> rows;
  std::vector<db::GraphOp> graph_ops;
  size_t capacity = SIZE_MAX;

  std::optional<int64_t> push(Row r) {
    if (rows.size() >= capacity) return std::nullopt;
    r.e.seq = static_cast<int64_t>(rows.size());
    rows.push_back(std::move(r));
    return rows.back().e.seq;
  }
  std::optional<int64_t> append(const db::Event& e) override { return push({e, {}, {}}); }
  std::optional<int64_t> appendCollective(const db::Event& e, const db::Collective& c) override {
    return push({e, c, {}});
  }
  std::optional<int64_t> appendGemm(const db::Event& e, const db::Gemm& g) override {
    return push({e, {}, g});
  }
  std::optional<int64_t> appendMarker(const db::Event& e, const db::Marker& m) override {
    return push({e, {}, {}, m});
  }
  bool appendGraphOp(const db::GraphOp& op) override {
    graph_ops.push_back(op);
    return true;
  }
};

}  // namespace detrace::testing
