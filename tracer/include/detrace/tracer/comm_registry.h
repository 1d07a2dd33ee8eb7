// CommRegistry: what the tracer knows about each NCCL communicator of this process.
//
// A communicator gets an id that is equal on every rank without any communication: a hash of the
// ncclUniqueId bytes every rank passed to ncclCommInitRank* (all of them, in order, for
// ncclCommInitRankScalable's several roots); for ncclCommSplit, a hash of the parent's id, the
// parent's split count (splits are collective, so every rank counts the same) and the color; for
// ncclCommShrink, a hash of the parent's id, its shrink count (counted apart: the excluded ranks
// do not call it) and the excluded ranks. Each communicator also numbers its calls (comm_seq), so
// that one call can be matched across ranks: its collectives in call order (every rank makes
// them all), and its sends and receives apart, per peer and direction (the n-th send to rank P is
// matched by P's n-th receive from this rank; ranks make different numbers of them, as the stages
// of a pipeline do, and they must not move the collectives' numbers).
//
// Thread-safety: all methods may be called from any thread. Bounded: at most kMaxComms entries;
// later communicators are not tracked (lookups return nullopt and the caller records -1s).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "detrace/db/records.h"

namespace detrace::tracer {

struct CommInfo {
  int64_t id = -1;
  int32_t rank = -1;
  int32_t nranks = -1;
  int32_t device = -1;
};

class CommRegistry {
 public:
  static constexpr size_t kMaxComms = 4096;

  // 63-bit FNV-1a hash of bytes (non-negative, so it survives the INTEGER column unchanged).
  static int64_t hashBytes(std::span<const uint8_t> bytes, uint64_t seed = 0xcbf29ce484222325ull);
  // The id of a communicator made from a unique id, or from several laid end to end
  // (ncclCommInitRankScalable; one id gives the same id as ncclCommInitRank's).
  static int64_t idFromUniqueId(std::span<const uint8_t> unique_id);

  void add(const void* comm, CommInfo info);
  // What a communicator split from `parent` with `color` is known by: its id, derived from the
  // parent's (-1 if the parent is unknown), and the parent's device; rank and size unset. Counts
  // the split, so call it once per ncclCommSplit, when it is called (NCCL may give the new handle
  // only later: at the outermost group end).
  CommInfo deriveSplit(const void* parent, int32_t color);
  // The same for a communicator shrunk from `parent` without the ranks `excluded` (in any order).
  CommInfo deriveShrink(const void* parent, std::span<const int32_t> excluded);
  void remove(const void* comm);
  std::optional<CommInfo> find(const void* comm) const;
  // Which numbering a call takes (its lane): the collectives', or, for a send or receive, its
  // peer's sends or receives (so that ranks making different numbers of them, as pipeline stages
  // do, still agree on every collective's number).
  static constexpr int64_t kCollectives = -1;
  static constexpr int64_t laneOf(db::CollOp op, int32_t peer) {
    if (op == db::CollOp::kSend) return 2 * int64_t{peer};
    if (op == db::CollOp::kRecv) return 2 * int64_t{peer} + 1;
    return kCollectives;
  }
  // The next sequence number (0, 1, ...) of `lane` on `comm`, or -1 for an unknown communicator
  // (or one with more point-to-point lanes than kMaxLanes).
  int64_t nextSeq(const void* comm, int64_t lane = kCollectives);
  // Sets the device of a registered communicator (one registered before NCCL could say it).
  void setDevice(const void* comm, int32_t device);
  // Gives back `seq`, taken by a call that never ran (an NCCL group only simulated), if it is the
  // last one taken on `comm`: the next call takes it again. Calls given back newest first undo a
  // group's numbers; false (nothing changed) if a later number was taken meanwhile.
  bool returnSeq(const void* comm, int64_t seq, int64_t lane = kCollectives);
  // nextSeq for the communicator known by its id and this process's rank in it (a CUDA graph
  // replaying a captured call: the handle is not at hand), or -1 if none is registered.
  int64_t nextSeqFor(int64_t id, int32_t rank, int64_t lane = kCollectives);
  // The communicator with the most ranks: it defines this process's rank and world size.
  std::optional<CommInfo> widest() const;

 private:
  static constexpr size_t kMaxLanes = 1 << 16;  // point-to-point lanes per communicator
  struct Entry {
    CommInfo info;
    int64_t seq = 0;  // the collectives' next number
    int64_t splits = 0;
    int64_t shrinks = 0;
    std::unordered_map<int64_t, int64_t> p2p;  // lane -> its next number
  };
  static int64_t* counterLocked(Entry& e, int64_t lane);
  // A parent communicator as a derived one needs it: its id (-1: unknown), how many communicators
  // were derived from it before this one (Entry::splits or Entry::shrinks, counted up) and its
  // device.
  struct Parent {
    int64_t id = -1;
    int64_t nth = 0;
    int32_t device = -1;
  };
  Parent parentLocked(const void* parent, int64_t Entry::*count);
  // A derived communicator's id (from its parent's and `key`) and device.
  static CommInfo derivedInfo(const Parent& parent, std::span<const uint8_t> key);
  mutable std::mutex mu_;
  std::unordered_map<const void*, Entry> comms_;
};

}  // namespace detrace::tracer
