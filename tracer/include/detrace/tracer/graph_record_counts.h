// How many activity records one launch of each executable graph gives (its kernel, memcpy and
// memset nodes), kept from the graph's instantiation to its destruction and followed through the
// calls that change it: cuGraphNodeSetEnabled (a disabled node runs as an empty one and gives no
// record) and cuGraphExecUpdate. The ReorderBuffer waits for that many records per launch, so a
// count too high holds every launch to its timeout and one too low lets records go unmatched.
// Thread-safe; bounded (an executable graph past the bound gets kRecordsUnknown, whose count the
// ReorderBuffer learns from its first launch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "detrace/tracer/reorder_buffer.h"

namespace detrace::tracer {

class GraphRecordCounts {
 public:
  explicit GraphRecordCounts(size_t max_graphs = size_t{1} << 14) : max_graphs_(max_graphs) {}

  // `exec` was instantiated from a graph giving `records` per launch (or kRecordsUnknown /
  // kRecordsVary); every node starts enabled.
  void instantiated(uint64_t exec, int32_t records);
  // A node of `exec` went from enabled `was` to `now` (cuGraphNodeSetEnabled returned success);
  // `gives_record`: it is a kernel, memcpy or memset node. `was_known`: whether its state before
  // the call could be read; if not, no count holds any more (kRecordsVary). False if `exec` is not
  // followed (past the bound): the count the ReorderBuffer learnt for it must then be forgotten.
  bool nodeEnabled(uint64_t exec, bool gives_record, bool was_known, bool was, bool now);
  // cuGraphExecUpdate gave `exec` another graph's nodes: the same topology, so the same count,
  // unless some of its nodes had been disabled (whether an update re-enables them is not
  // documented): then no count holds.
  void updated(uint64_t exec);
  // `exec` is destroyed (a new graph may be made at its address).
  void forget(uint64_t exec);
  // Records to wait for per launch of `exec`: a count, kRecordsUnknown or kRecordsVary.
  int32_t expected(uint64_t exec) const;

  // Until following begins (the cuGraphNodeSetEnabled callbacks are off before the first start:
  // a driver-API callback costs every driver call of the process), the top-level kernel, memcpy
  // and memset nodes of each executable graph are kept while the graph they came from lives (only
  // its nodes can be named to enable or disable one), so that the state the program left them in
  // can be read when following begins. Bounded: past kMaxRememberedNodes in all, a graph's nodes
  // are not kept (and a node disabled before the first start goes unseen, as before).
  static constexpr size_t kMaxRememberedNodes = size_t{1} << 20;
  bool following() const;
  void rememberNodes(uint64_t exec, uint64_t graph, std::vector<uint64_t> nodes);
  // The graph `graph` is destroyed: its nodes can no longer be named.
  void graphDestroyed(uint64_t graph);
  // Following begins (the callbacks are on): every kept node's state is read through
  // `state(exec, node)` (1 disabled, 0 enabled, -1 unreadable), without the lock held, and the
  // counts are corrected; nothing is kept from then on. A graph whose nodes changed state while
  // they were read holds no count (kRecordsVary).
  void startFollowing(const std::function<int(uint64_t exec, uint64_t node)>& state);

 private:
  struct Entry {
    int32_t records = kRecordsUnknown;
    int32_t base = kRecordsUnknown;  // records with every node enabled
    int32_t disabled = 0;            // nodes giving records that are disabled now
    uint64_t changes = 0;            // nodeEnabled calls that changed something
    uint64_t generation = 0;         // tells a graph from a later one at its address
    uint64_t graph = 0;              // the graph its remembered nodes come from
    std::vector<uint64_t> nodes;     // remembered until following begins
  };
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> by_exec_;
  size_t max_graphs_;
  bool following_ = false;
  size_t remembered_ = 0;  // nodes kept in all
  uint64_t generations_ = 0;
};

}  // namespace detrace::tracer
