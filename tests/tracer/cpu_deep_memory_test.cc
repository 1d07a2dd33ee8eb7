// Deep window, CPU side: the allocation map (ranges, trimming, mapped pieces merged, bounds,
// concurrent use), packing a launch's parameters, finding the memory its words point into, and the
// layout's text form. Random inputs are fresh each run; the seed is printed with any failure.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <cuda.h>  // CU_LAUNCH_PARAM_* for `extra` lists

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "detrace/tracer/allocation_map.h"
#include "detrace/tracer/launch_params.h"

#include "../db/test_util.h"

namespace detrace::tracer {
namespace {

using testing::Rng;

constexpr AllocKind kAllKinds[] = {AllocKind::kMalloc, AllocKind::kAsync,   AllocKind::kMapped,
                                   AllocKind::kIpc,    AllocKind::kManaged, AllocKind::kOther};

AllocKind randomKind(Rng& rng) { return kAllKinds[rng.range(0, 5)]; }

// ---- AllocationMap -------------------------------------------------------------------------------

TEST(AllocationMap, FindsAddressesInsideAndOnlyInside) {
  AllocationMap map;
  ASSERT_TRUE(map.add(0x1000, 0x100, AllocKind::kMalloc));
  ASSERT_TRUE(map.add(0x1100, 0x10, AllocKind::kAsync));  // adjacent, not merged: not kMapped
  EXPECT_EQ(map.find(0x1000), (Allocation{0x1000, 0x100, AllocKind::kMalloc}));
  EXPECT_EQ(map.find(0x10ff), (Allocation{0x1000, 0x100, AllocKind::kMalloc}));
  EXPECT_EQ(map.find(0x1100), (Allocation{0x1100, 0x10, AllocKind::kAsync}));
  EXPECT_FALSE(map.find(0xfff).has_value());
  EXPECT_FALSE(map.find(0x1110).has_value());
  EXPECT_FALSE(map.find(0).has_value());
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.refused(), 0);
  std::set<std::string> names;
  for (AllocKind k : kAllKinds) names.insert(allocKindName(k));
  EXPECT_EQ(names.size(), std::size(kAllKinds));
}

TEST(AllocationMap, RefusesEmptyAndWrappingRangesAndHandlesTheTopOfTheAddressSpace) {
  AllocationMap map;
  EXPECT_FALSE(map.add(0x1000, 0, AllocKind::kMalloc));
  EXPECT_FALSE(map.add(UINT64_MAX - 10, 100, AllocKind::kMalloc));
  EXPECT_EQ(map.refused(), 2);
  EXPECT_EQ(map.size(), 0u);
  ASSERT_TRUE(map.add(UINT64_MAX - 100, 100, AllocKind::kMalloc));
  EXPECT_TRUE(map.find(UINT64_MAX - 1).has_value());
  EXPECT_FALSE(map.find(UINT64_MAX).has_value());
  map.removeRange(UINT64_MAX - 50, 1000);  // saturates at 2^64
  EXPECT_EQ(map.find(UINT64_MAX - 100), (Allocation{UINT64_MAX - 100, 50, AllocKind::kMalloc}));
  EXPECT_FALSE(map.find(UINT64_MAX - 50).has_value());
}

TEST(AllocationMap, RemoveTakesOnlyTheAllocationStartingThere) {
  AllocationMap map;
  ASSERT_TRUE(map.add(0x1000, 0x100, AllocKind::kMalloc));
  EXPECT_FALSE(map.remove(0x1080));  // inside, not a base
  EXPECT_TRUE(map.find(0x1080).has_value());
  EXPECT_TRUE(map.remove(0x1000));
  EXPECT_FALSE(map.remove(0x1000));
  EXPECT_FALSE(map.find(0x1080).has_value());
  EXPECT_EQ(map.size(), 0u);
}

TEST(AllocationMap, RemoveRangeDropsInsideTrimsStraddlersAndSplitsCoverers) {
  AllocationMap map;
  ASSERT_TRUE(map.add(0x000, 0x100, AllocKind::kMapped));   // straddles the lower end
  ASSERT_TRUE(map.add(0x100, 0x080, AllocKind::kMalloc));   // inside
  ASSERT_TRUE(map.add(0x200, 0x100, AllocKind::kManaged));  // straddles the upper end
  map.removeRange(0x080, 0x200);                            // [0x80, 0x280)
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.find(0x07f), (Allocation{0x000, 0x080, AllocKind::kMapped}));
  EXPECT_FALSE(map.find(0x080).has_value());
  EXPECT_FALSE(map.find(0x140).has_value());
  EXPECT_FALSE(map.find(0x27f).has_value());
  EXPECT_EQ(map.find(0x280), (Allocation{0x280, 0x080, AllocKind::kManaged}));
  EXPECT_FALSE(map.remove(0x200));
  EXPECT_TRUE(map.remove(0x280));

  ASSERT_TRUE(map.add(0x1000, 0x1000, AllocKind::kIpc));
  map.removeRange(0x1400, 0x100);  // a hole in the middle
  EXPECT_EQ(map.find(0x1000), (Allocation{0x1000, 0x400, AllocKind::kIpc}));
  EXPECT_EQ(map.find(0x1fff), (Allocation{0x1500, 0xb00, AllocKind::kIpc}));
  EXPECT_FALSE(map.find(0x1450).has_value());
}

TEST(AllocationMap, AddingOverAReusedRangeReplacesEveryOverlappingEntry) {
  AllocationMap map;
  ASSERT_TRUE(map.add(0x000, 0x100, AllocKind::kMalloc));
  ASSERT_TRUE(map.add(0x100, 0x100, AllocKind::kMalloc));
  ASSERT_TRUE(map.add(0x200, 0x100, AllocKind::kMalloc));
  ASSERT_TRUE(map.add(0x300, 0x100, AllocKind::kMalloc));
  ASSERT_TRUE(map.add(0x0ff, 0x201, AllocKind::kAsync));  // [0xff, 0x300): overlaps the first three
  EXPECT_EQ(map.size(), 2u);
  EXPECT_FALSE(map.find(0x000).has_value());
  EXPECT_EQ(map.find(0x0ff), (Allocation{0x0ff, 0x201, AllocKind::kAsync}));
  EXPECT_EQ(map.find(0x2ff), (Allocation{0x0ff, 0x201, AllocKind::kAsync}));
  EXPECT_EQ(map.find(0x300), (Allocation{0x300, 0x100, AllocKind::kMalloc}));
  EXPECT_FALSE(map.remove(0x100));
  EXPECT_FALSE(map.remove(0x200));
}

TEST(AllocationMap, AFullMapRefusesNewRangesButAcceptsReplacements) {
  AllocationMap map(3);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(map.add(i * 0x100, 0x100, AllocKind::kMalloc));
  EXPECT_FALSE(map.add(0x1000, 0x10, AllocKind::kMalloc));
  EXPECT_EQ(map.refused(), 1);
  EXPECT_FALSE(map.find(0x1000).has_value());
  EXPECT_TRUE(map.find(0x000).has_value());  // a refusal leaves the map as it was
  EXPECT_TRUE(map.add(0x080, 0x100, AllocKind::kAsync));  // replaces two: room for it
  EXPECT_EQ(map.size(), 2u);
  ASSERT_TRUE(map.add(0x1000, 0x10, AllocKind::kMalloc));
  // Splitting an entry needs one more: refused and counted, the lower part kept.
  map.removeRange(0x1004, 4);
  EXPECT_EQ(map.refused(), 2);
  EXPECT_EQ(map.find(0x1000), (Allocation{0x1000, 4, AllocKind::kMalloc}));
  EXPECT_FALSE(map.find(0x100c).has_value());
  map.clear();
  EXPECT_EQ(map.size(), 0u);
  EXPECT_FALSE(map.find(0x080).has_value());
  EXPECT_EQ(map.refused(), 2);
}

TEST(AllocationMap, MappedPiecesMergeWithContiguousMappedPiecesOnly) {
  AllocationMap map;
  ASSERT_TRUE(map.add(0x1000, 0x1000, AllocKind::kMapped));
  ASSERT_TRUE(map.add(0x2000, 0x1000, AllocKind::kMapped));
  ASSERT_TRUE(map.add(0x3000, 0x2000, AllocKind::kMapped));
  ASSERT_TRUE(map.add(0x5000, 0x1000, AllocKind::kMalloc));  // contiguous, not mapped
  ASSERT_TRUE(map.add(0x6000, 0x1000, AllocKind::kMapped));
  ASSERT_TRUE(map.add(0x8000, 0x1000, AllocKind::kMapped));  // after a gap
  const Allocation run{0x1000, 0x4000, AllocKind::kMapped};
  EXPECT_EQ(map.find(0x1000), run);
  EXPECT_EQ(map.find(0x2abc), run);
  EXPECT_EQ(map.find(0x4fff), run);
  EXPECT_EQ(map.find(0x5000), (Allocation{0x5000, 0x1000, AllocKind::kMalloc}));
  EXPECT_EQ(map.find(0x6000), (Allocation{0x6000, 0x1000, AllocKind::kMapped}));
  EXPECT_EQ(map.find(0x8000), (Allocation{0x8000, 0x1000, AllocKind::kMapped}));
  // Capped: whole pieces, alternately before and after the one holding the address.
  EXPECT_EQ(map.find(0x2abc, 0x2000), (Allocation{0x1000, 0x2000, AllocKind::kMapped}));
  EXPECT_EQ(map.find(0x2abc, 0x3fff), (Allocation{0x1000, 0x2000, AllocKind::kMapped}));
  EXPECT_EQ(map.find(0x3000, 0x1000), (Allocation{0x3000, 0x2000, AllocKind::kMapped}));
  EXPECT_EQ(map.find(0x3000, 0x3000), (Allocation{0x2000, 0x3000, AllocKind::kMapped}));
  // Unmapping a piece splits the run.
  map.removeRange(0x2000, 0x1000);
  EXPECT_EQ(map.find(0x1000), (Allocation{0x1000, 0x1000, AllocKind::kMapped}));
  EXPECT_EQ(map.find(0x3000), (Allocation{0x3000, 0x2000, AllocKind::kMapped}));
}

TEST(AllocationMap, CappedMergesAreWholePieceRunsThatCannotGrowFurther) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  for (int round = 0; round < 50; ++round) {
    AllocationMap map;
    std::vector<Allocation> pieces;  // in address order
    uint64_t at = 0x10000;
    for (int i = 0, n = static_cast<int>(rng.range(1, 60)); i < n; ++i) {
      if (rng.range(0, 9) == 0) at += static_cast<uint64_t>(rng.range(1, 50));  // a gap
      Allocation a{at, static_cast<uint64_t>(rng.range(1, 100)),
                   rng.range(0, 7) == 0 ? AllocKind::kMalloc : AllocKind::kMapped};
      ASSERT_TRUE(map.add(a.base, a.size, a.kind));
      pieces.push_back(a);
      at += a.size;
    }
    auto mappedNeighbour = [&](size_t i, size_t j) {  // pieces i and j touch and are both mapped
      const Allocation& lo = pieces[std::min(i, j)];
      const Allocation& hi = pieces[std::max(i, j)];
      return lo.kind == AllocKind::kMapped && hi.kind == AllocKind::kMapped &&
             lo.base + lo.size == hi.base;
    };
    for (int probe = 0; probe < 50; ++probe) {
      size_t k = static_cast<size_t>(rng.range(0, static_cast<int64_t>(pieces.size()) - 1));
      uint64_t addr = pieces[k].base + static_cast<uint64_t>(rng.range(0, static_cast<int64_t>(pieces[k].size) - 1));
      uint64_t cap = static_cast<uint64_t>(rng.range(1, 2000));
      auto got = map.find(addr, cap);
      ASSERT_TRUE(got.has_value());
      ASSERT_EQ(got->kind, pieces[k].kind);
      if (pieces[k].kind != AllocKind::kMapped) {
        EXPECT_EQ(*got, pieces[k]);
        continue;
      }
      // The run [lo, hi] of pieces it covers, exactly.
      size_t lo = k, hi = k;
      while (lo > 0 && pieces[lo].base > got->base && mappedNeighbour(lo - 1, lo)) --lo;
      while (hi + 1 < pieces.size() && pieces[hi].base + pieces[hi].size < got->base + got->size &&
             mappedNeighbour(hi, hi + 1)) {
        ++hi;
      }
      ASSERT_EQ(got->base, pieces[lo].base) << "addr " << addr << " cap " << cap;
      ASSERT_EQ(got->base + got->size, pieces[hi].base + pieces[hi].size) << "addr " << addr;
      EXPECT_LE(got->size, std::max(cap, pieces[k].size));
      // Maximal: neither neighbouring mapped piece would still fit.
      if (lo > 0 && mappedNeighbour(lo - 1, lo)) {
        EXPECT_GT(got->size + pieces[lo - 1].size, cap);
      }
      if (hi + 1 < pieces.size() && mappedNeighbour(hi, hi + 1)) {
        EXPECT_GT(got->size + pieces[hi + 1].size, cap);
      }
    }
  }
}

// A plain model of the map: a list of disjoint entries, searched linearly.
struct ModelMap {
  std::vector<Allocation> entries;

  void add(uint64_t base, uint64_t size, AllocKind kind) {
    std::erase_if(entries, [&](const Allocation& a) { return a.base < base + size && base < a.base + a.size; });
    entries.push_back({base, size, kind});
  }
  void remove(uint64_t base) {
    std::erase_if(entries, [&](const Allocation& a) { return a.base == base; });
  }
  void removeRange(uint64_t base, uint64_t size) {
    std::vector<Allocation> out;
    for (const Allocation& a : entries) {
      uint64_t end = base + size, a_end = a.base + a.size;
      if (a_end <= base || a.base >= end) {
        out.push_back(a);
        continue;
      }
      if (a.base < base) out.push_back({a.base, base - a.base, a.kind});
      if (a_end > end) out.push_back({end, a_end - end, a.kind});
    }
    entries = out;
  }
  const Allocation* at(uint64_t addr) const {
    for (const Allocation& a : entries) {
      if (a.base <= addr && addr < a.base + a.size) return &a;
    }
    return nullptr;
  }
  // Uncapped: the whole run of touching mapped pieces.
  std::optional<Allocation> find(uint64_t addr) const {
    const Allocation* a = at(addr);
    if (!a) return std::nullopt;
    Allocation r = *a;
    if (r.kind != AllocKind::kMapped) return r;
    for (const Allocation* p; r.base > 0 && (p = at(r.base - 1)) && p->kind == AllocKind::kMapped;) {
      r.size += p->size;
      r.base = p->base;
    }
    for (const Allocation* p; (p = at(r.base + r.size)) && p->kind == AllocKind::kMapped;) {
      r.size += p->size;
    }
    return r;
  }
};

TEST(AllocationMap, RandomOperationsMatchAPlainModel) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  AllocationMap map;
  ModelMap model;
  constexpr uint64_t kSpace = 512;
  for (int op = 0; op < 1500; ++op) {
    uint64_t base = static_cast<uint64_t>(rng.range(0, kSpace - 1));
    uint64_t size = static_cast<uint64_t>(rng.range(1, 64));
    switch (rng.range(0, 5)) {
      case 0: case 1: case 2: {
        AllocKind kind = rng.range(0, 1) ? AllocKind::kMapped : randomKind(rng);
        ASSERT_TRUE(map.add(base, size, kind));
        model.add(base, size, kind);
        break;
      }
      case 3: {
        // Mostly a real base.
        if (!model.entries.empty() && rng.range(0, 3)) {
          base = model.entries[static_cast<size_t>(rng.range(0, static_cast<int64_t>(model.entries.size()) - 1))].base;
        }
        bool existed = model.at(base) && model.at(base)->base == base;
        EXPECT_EQ(map.remove(base), existed);
        model.remove(base);
        break;
      }
      default:
        map.removeRange(base, size);
        model.removeRange(base, size);
    }
    ASSERT_EQ(map.size(), model.entries.size()) << "after op " << op;
    if (op % 10 != 0) continue;
    for (uint64_t addr = 0; addr < kSpace + 80; ++addr) {
      ASSERT_EQ(map.find(addr, UINT64_MAX), model.find(addr)) << "addr " << addr << " after op " << op;
    }
  }
  EXPECT_EQ(map.refused(), 0);
}

TEST(AllocationMap, ConcurrentReadersSeeStableEntriesWhileWritersChurn) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  AllocationMap map;
  constexpr uint64_t kStableBase = 0x10000000, kStride = 0x10000, kStableSize = 0x8000;
  constexpr uint64_t kChurnBase = 0x100000000, kChurnSpan = 0x100000;
  constexpr int kStable = 200;
  for (int i = 0; i < kStable; ++i) {
    ASSERT_TRUE(map.add(kStableBase + static_cast<uint64_t>(i) * kStride, kStableSize, AllocKind::kMalloc));
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> bad{0}, reads{0};
  auto writer = [&](int w, uint32_t seed) {
    std::mt19937_64 gen(seed);
    uint64_t lo = kChurnBase + static_cast<uint64_t>(w) * kChurnSpan;
    for (int i = 0; i < 30000; ++i) {
      uint64_t base = lo + gen() % (kChurnSpan - 0x1000), size = 1 + gen() % 0x1000;
      switch (gen() % 3) {
        case 0: map.add(base, size, gen() % 2 ? AllocKind::kMapped : AllocKind::kAsync); break;
        case 1: map.remove(base); break;
        default: map.removeRange(base, size);
      }
    }
  };
  auto reader = [&](uint32_t seed) {
    std::mt19937_64 gen(seed);
    while (!stop.load()) {
      uint64_t i = gen() % kStable, off = gen() % kStableSize;
      auto a = map.find(kStableBase + i * kStride + off);
      if (!a || *a != Allocation{kStableBase + i * kStride, kStableSize, AllocKind::kMalloc}) ++bad;
      uint64_t churn = kChurnBase + gen() % (2 * kChurnSpan);
      if (auto c = map.find(churn); c && (churn < c->base || churn - c->base >= c->size ||
                                          c->base < kChurnBase || c->size > 2 * kChurnSpan)) {
        ++bad;
      }
      (void)map.size();
      ++reads;
    }
  };
  std::vector<std::thread> readers, writers;
  for (int r = 0; r < 2; ++r) readers.emplace_back(reader, static_cast<uint32_t>(rng.u64()));
  for (int w = 0; w < 2; ++w) writers.emplace_back(writer, w, static_cast<uint32_t>(rng.u64()));
  for (auto& t : writers) t.join();
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 0);
  for (int i = 0; i < kStable; ++i) {
    EXPECT_TRUE(map.find(kStableBase + static_cast<uint64_t>(i) * kStride).has_value());
  }
}

// ---- packParams ----------------------------------------------------------------------------------

// A random parameter list laid out the way the compiler does: each parameter at a multiple of its
// alignment (1, 2, 4 or 8), sizes from a 1-byte char to multi-word structs.
std::vector<ParamInfo> randomLayout(Rng& rng, int max_params) {
  std::vector<ParamInfo> layout;
  uint32_t offset = 0;
  for (int i = 0, n = static_cast<int>(rng.range(0, max_params)); i < n; ++i) {
    uint32_t align = 1u << rng.range(0, 3);
    uint32_t size = align * static_cast<uint32_t>(rng.range(1, align == 8 ? 6 : 3));
    offset = (offset + align - 1) / align * align;
    layout.push_back({offset, size});
    offset += size;
  }
  return layout;
}

TEST(PackParams, CopiesEachParameterToItsOffsetAndZeroesTheGaps) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  for (int round = 0; round < 200; ++round) {
    std::vector<ParamInfo> layout = randomLayout(rng, 20);
    std::vector<std::vector<uint8_t>> values;
    std::vector<void*> ptrs;
    for (const ParamInfo& p : layout) {
      values.emplace_back(p.size);
      for (auto& b : values.back()) b = static_cast<uint8_t>(rng.range(1, 255));  // never 0
    }
    for (auto& v : values) ptrs.push_back(v.data());
    std::vector<uint8_t> packed = packParams(layout, ptrs.data());
    size_t end = 0;
    for (const ParamInfo& p : layout) end = std::max<size_t>(end, p.offset + p.size);
    ASSERT_EQ(packed.size(), end);
    std::vector<bool> covered(end, false);
    for (size_t i = 0; i < layout.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(packed.data() + layout[i].offset, values[i].data(), layout[i].size))
          << "param " << i << " round " << round;
      std::fill_n(covered.begin() + layout[i].offset, layout[i].size, true);
    }
    for (size_t b = 0; b < end; ++b) {
      if (!covered[b]) {
        EXPECT_EQ(packed[b], 0) << "gap byte " << b;
      }
    }
  }
}

TEST(PackParams, RefusesMissingPointersAndOversizedLayouts) {
  uint64_t a = 0x1122334455667788;
  uint32_t b = 0xdeadbeef;
  void* ptrs[] = {&a, &b};
  std::vector<ParamInfo> layout = {{0, 8}, {8, 4}};
  EXPECT_EQ(packParams(layout, ptrs).size(), 12u);
  EXPECT_TRUE(packParams(layout, nullptr).empty());
  EXPECT_TRUE(packParams({}, ptrs).empty());
  void* with_null[] = {&a, nullptr};
  EXPECT_TRUE(packParams(layout, with_null).empty());
  std::vector<uint8_t> big(kMaxParamBytes + 8, 0xab);
  void* big_ptr[] = {big.data()};
  EXPECT_EQ(packParams({{0, static_cast<uint32_t>(kMaxParamBytes)}}, big_ptr).size(), kMaxParamBytes);
  EXPECT_TRUE(packParams({{8, static_cast<uint32_t>(kMaxParamBytes - 7)}}, big_ptr).empty());
  EXPECT_TRUE(packParams({{UINT32_MAX, 8}}, big_ptr).empty());
}

// ---- launchParamBytes
// ----------------------------------------------------------------------------

// `bytes` bytes that end where an inaccessible page begins: reading one byte past them faults.
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t bytes) : page_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
    pages_ = (bytes + page_ - 1) / page_ + 1;
    void* m =
        mmap(nullptr, pages_ * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(m, MAP_FAILED);
    base_ = static_cast<uint8_t*>(m);
    EXPECT_EQ(mprotect(base_ + (pages_ - 1) * page_, page_, PROT_NONE), 0);
    data_ = base_ + (pages_ - 1) * page_ - bytes;
  }
  ~GuardedBytes() { munmap(base_, pages_ * page_); }
  uint8_t* data() { return data_; }

 private:
  size_t page_, pages_ = 0;
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
};

TEST(LaunchParamBytes, TheExtraBufferIsReadNoFurtherThanTheLayoutNeedsWhateverSizeIsStated) {
  const std::vector<ParamInfo> layout = {{0, 8}, {8, 8}, {16, 1}};  // (T* p, size_t n, uint8_t v)
  GuardedBytes buffer(17);  // exactly what the layout needs, then a page that faults
  for (size_t i = 0; i < 17; ++i) buffer.data()[i] = static_cast<uint8_t>(i + 1);
  for (size_t stated :
       {size_t{17}, size_t{24}, size_t{4096}, kMaxParamBytes, kMaxParamBytes + 1, SIZE_MAX}) {
    SCOPED_TRACE(stated);
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                     &stated, CU_LAUNCH_PARAM_END};
    LaunchParamBytes got = launchParamBytes(layout, nullptr, extra);
    EXPECT_EQ(got.problem, ParamsProblem::kNone);
    ASSERT_EQ(got.bytes.size(), 17u);
    EXPECT_EQ(0, std::memcmp(got.bytes.data(), buffer.data(), 17));
  }
  // A stated size below the layout's extent: that much is read, the words past it are not looked
  // at.
  size_t small = 12;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_SIZE, &small, CU_LAUNCH_PARAM_BUFFER_POINTER,
                   buffer.data(), nullptr};
  LaunchParamBytes got = launchParamBytes(layout, nullptr, extra);
  EXPECT_EQ(got.problem, ParamsProblem::kNone);
  EXPECT_EQ(got.bytes.size(), 12u);
}

TEST(LaunchParamBytes, KernelParamsArePackedAndWhatIsMissingOrTooLargeIsSaidApart) {
  const std::vector<ParamInfo> layout = {{0, 8}, {8, 4}};
  uint64_t a = 0x1122334455667788;
  uint32_t b = 0xdeadbeef;
  void* ptrs[] = {&a, &b};
  LaunchParamBytes packed = launchParamBytes(layout, ptrs, nullptr);
  EXPECT_EQ(packed.problem, ParamsProblem::kNone);
  EXPECT_EQ(packed.bytes, packParams(layout, ptrs));
  void* with_null[] = {&a, nullptr};
  EXPECT_EQ(launchParamBytes(layout, with_null, nullptr).problem, ParamsProblem::kMissing);
  EXPECT_EQ(launchParamBytes(layout, nullptr, nullptr).problem, ParamsProblem::kMissing);
  uint8_t buffer[12] = {};
  size_t size = sizeof buffer, zero = 0;
  void* no_size[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_END};
  void* no_buffer[] = {CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  void* size_zero[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &zero,
                       CU_LAUNCH_PARAM_END};
  void* empty[] = {CU_LAUNCH_PARAM_END};
  for (void** extra : {no_size, no_buffer, size_zero, empty}) {
    LaunchParamBytes got = launchParamBytes(layout, nullptr, extra);
    EXPECT_EQ(got.problem, ParamsProblem::kMissing);
    EXPECT_TRUE(got.bytes.empty());
  }
  const std::vector<ParamInfo> huge = {{0, 8}, {8, static_cast<uint32_t>(kMaxParamBytes)}};
  std::vector<uint8_t> big(kMaxParamBytes + 8);
  void* big_ptrs[] = {big.data(), big.data()};
  EXPECT_EQ(launchParamBytes(huge, big_ptrs, nullptr).problem, ParamsProblem::kTooLarge);
  void* big_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, big.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                       &size, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(launchParamBytes(huge, nullptr, big_extra).problem, ParamsProblem::kTooLarge);
}

TEST(LaunchParamBytes, AnExtraListWithoutItsEndIsNotFollowedPast64Entries) {
  // 64 entries of an unknown key, with no end marker, right before a page that faults.
  GuardedBytes list(64 * 2 * sizeof(void*));
  auto** extra = reinterpret_cast<void**>(list.data());
  for (int i = 0; i < 128; ++i) extra[i] = reinterpret_cast<void*>(uintptr_t{0x77});
  LaunchParamBytes got = launchParamBytes({{0, 8}}, nullptr, extra);
  EXPECT_EQ(got.problem, ParamsProblem::kMissing);
}

// ---- deepTargets ---------------------------------------------------------------------------------

std::vector<uint8_t> packWords(size_t bytes, const std::map<size_t, uint64_t>& words) {
  std::vector<uint8_t> out(bytes, 0);
  for (auto [at, w] : words) std::memcpy(out.data() + at, &w, 8);
  return out;
}

TEST(DeepTargets, StructParamsWithSeveralPointersAndDedupByAllocation) {
  AllocationMap map;
  ASSERT_TRUE(map.add(0x7f0000000000, 0x1000, AllocKind::kMalloc));  // A
  ASSERT_TRUE(map.add(0x7f0000100000, 0x2000, AllocKind::kAsync));   // B
  // param 0: a 32-byte struct {A+0x10, B, int 7, A+0x800}; param 1: an int; param 2: B's last byte.
  std::vector<ParamInfo> layout = {{0, 32}, {32, 4}, {40, 8}};
  std::vector<uint8_t> packed = packWords(48, {{0, 0x7f0000000010}, {8, 0x7f0000100000},
                                               {16, 7}, {24, 0x7f0000000800}, {40, 0x7f0000101fff}});
  std::vector<DeepTarget> t = deepTargets(layout, packed, map);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], (DeepTarget{{0x7f0000000000, 0x1000, AllocKind::kMalloc}, "arg0,arg0+24"}));
  EXPECT_EQ(t[1], (DeepTarget{{0x7f0000100000, 0x2000, AllocKind::kAsync}, "arg0+8,arg2"}));
}

TEST(DeepTargets, UnalignedAndSmallWordsAreIgnored) {
  AllocationMap map;
  const uint64_t p = 0x7f0000000040;
  ASSERT_TRUE(map.add(0x7f0000000000, 0x1000, AllocKind::kMalloc));
  // A pointer at byte 4 of a 16-byte param, in the last 4 bytes of a 12-byte param, and split
  // across two 4-byte params: none is an aligned word of a parameter.
  EXPECT_TRUE(deepTargets({{0, 16}}, packWords(16, {{4, p}}), map).empty());
  EXPECT_TRUE(deepTargets({{0, 12}}, packWords(16, {{4, p}}), map).empty());
  EXPECT_TRUE(deepTargets({{0, 4}, {4, 4}}, packWords(8, {{0, p}}), map).empty());
  // Alignment counts from the parameter's own offset: an 8-byte param at offset 4 is one word.
  auto t = deepTargets({{0, 4}, {4, 8}}, packWords(12, {{4, p}}), map);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].args, "arg1");
  // Words beyond the packed bytes (a truncated buffer) are skipped, not read.
  EXPECT_TRUE(deepTargets({{0, 16}}, packWords(8, {}), map).empty());
  EXPECT_EQ(deepTargets({{0, 16}}, packWords(8, {{0, p}}), map).size(), 1u);
}

TEST(DeepTargets, MappedPiecesOfOneRunAreOneTarget) {
  AllocationMap map;
  ASSERT_TRUE(map.add(0x200000000, 0x200000, AllocKind::kMapped));
  ASSERT_TRUE(map.add(0x200200000, 0x200000, AllocKind::kMapped));
  auto t = deepTargets({{0, 8}, {8, 8}}, packWords(16, {{0, 0x200000100}, {8, 0x2003fffff}}), map);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0], (DeepTarget{{0x200000000, 0x400000, AllocKind::kMapped}, "arg0,arg1"}));
  // With a cap below the run, each word gets its own piece.
  t = deepTargets({{0, 8}, {8, 8}}, packWords(16, {{0, 0x200000100}, {8, 0x2003fffff}}), map, 64,
                  0x200000);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].alloc.base, 0x200200000u);
}

// Contiguous mapped pieces are merged around each word separately, up to the cap: two words in
// neighbouring pieces get overlapping extents. They become one target, the union, digested once.
TEST(DeepTargets, OverlappingMergedExtentsBecomeOneTargetTheirUnion) {
  constexpr uint64_t kBase = 0x300000000, kMiB = 1 << 20, kPiece = 100 * kMiB, kCap = 256 * kMiB;
  AllocationMap map;
  for (uint64_t i = 0; i < 5; ++i)
    ASSERT_TRUE(map.add(kBase + i * kPiece, kPiece, AllocKind::kMapped));
  auto in = [&](int piece) { return kBase + piece * kPiece + 0x40; };
  // Pieces 1 and 2: merged alone, arg0 reaches [0, 200) MiB and arg1 [100, 300) MiB.
  ASSERT_EQ(map.find(in(1), kCap)->base, kBase);
  ASSERT_EQ(map.find(in(2), kCap)->base, kBase + kPiece);
  auto t = deepTargets({{0, 8}, {8, 8}}, packWords(16, {{0, in(1)}, {8, in(2)}}), map, 64, kCap);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0], (DeepTarget{{kBase, 3 * kPiece, AllocKind::kMapped}, "arg0,arg1"}));
  // A later word can join two targets: pieces 0 ([0, 200)), 4 ([300, 500)), 3 ([200, 400), joins
  // the second), then 2 ([100, 300): joins the first, which now meets the second). One target, its
  // words in parameter order.
  std::vector<ParamInfo> four = {{0, 8}, {8, 8}, {16, 8}, {24, 8}};
  t = deepTargets(four, packWords(32, {{0, in(0)}, {8, in(4)}, {16, in(3)}, {24, in(2)}}), map, 64,
                  kCap);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0], (DeepTarget{{kBase, 5 * kPiece, AllocKind::kMapped}, "arg0,arg1,arg2,arg3"}));
  // Without the last word, two targets that only touch stay apart.
  t = deepTargets(four, packWords(32, {{0, in(0)}, {8, in(4)}, {16, in(3)}}), map, 64, kCap);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], (DeepTarget{{kBase, 2 * kPiece, AllocKind::kMapped}, "arg0"}));
  EXPECT_EQ(t[1], (DeepTarget{{kBase + 2 * kPiece, 3 * kPiece, AllocKind::kMapped}, "arg1,arg2"}));
}

// A word at the first byte of an allocation that starts where the previous pointer word's
// allocation ends may be a one-past-the-end pointer (thrust's and CUB's `last`): it is still
// digested (an output allocated right after its input looks the same), and its name says "?".
TEST(DeepTargets, AWordThatMayBeTheEndOfThePreviousWordsAllocationIsMarked) {
  AllocationMap map;
  constexpr uint64_t kA = 0x7f0000010000, kB = 0x7f0000011000, kC = 0x7f0000020000;
  ASSERT_TRUE(map.add(kA, 0x1000, AllocKind::kMalloc));
  ASSERT_TRUE(map.add(kB, 0x1000, AllocKind::kMalloc));  // right after A
  ASSERT_TRUE(map.add(kC, 0x1000, AllocKind::kMalloc));  // apart
  const Allocation a{kA, 0x1000, AllocKind::kMalloc}, b{kB, 0x1000, AllocKind::kMalloc},
      c{kC, 0x1000, AllocKind::kMalloc};
  const std::vector<ParamInfo> three = {{0, 8}, {8, 8}, {16, 8}};
  auto targets = [&](const std::map<size_t, uint64_t>& words) {
    return deepTargets(three, packWords(24, words), map);
  };
  // (first, last) over A: last is B's first byte.
  EXPECT_EQ(targets({{0, kA}, {8, kB}}), (std::vector<DeepTarget>{{a, "arg0"}, {b, "arg1?"}}));
  EXPECT_EQ(targets({{0, kA + 0x80}, {8, kB}}),
            (std::vector<DeepTarget>{{a, "arg0"}, {b, "arg1?"}}));
  // A word that is not a pointer between them does not matter; a struct's two words neither.
  EXPECT_EQ(targets({{0, kA}, {8, 7}, {16, kB}}),
            (std::vector<DeepTarget>{{a, "arg0"}, {b, "arg2?"}}));
  EXPECT_EQ(deepTargets({{0, 16}}, packWords(16, {{0, kA}, {8, kB}}), map),
            (std::vector<DeepTarget>{{a, "arg0"}, {b, "arg0+8?"}}));
  // Not marked: inside B, B before A, C (not where A ends), or a pointer to C in between.
  EXPECT_EQ(targets({{0, kA}, {8, kB + 8}}), (std::vector<DeepTarget>{{a, "arg0"}, {b, "arg1"}}));
  EXPECT_EQ(targets({{0, kB}, {8, kA}}), (std::vector<DeepTarget>{{b, "arg0"}, {a, "arg1"}}));
  EXPECT_EQ(targets({{0, kA}, {8, kC}}), (std::vector<DeepTarget>{{a, "arg0"}, {c, "arg1"}}));
  EXPECT_EQ(targets({{0, kA}, {8, kC}, {16, kB}}),
            (std::vector<DeepTarget>{{a, "arg0"}, {c, "arg1"}, {b, "arg2"}}));
  // Marked and also pointed into: the allocation is one target, both words named.
  EXPECT_EQ(targets({{0, kA}, {8, kB}, {16, kB + 0x10}}),
            (std::vector<DeepTarget>{{a, "arg0"}, {b, "arg1?,arg2"}}));
}

TEST(DeepTargets, MaxTargetsKeepsTheFirstAllocationsAndStillNamesTheirLaterWords) {
  AllocationMap map;
  std::map<size_t, uint64_t> words;
  std::vector<ParamInfo> layout;
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(map.add(0x10000 * (i + 1), 0x100, AllocKind::kMalloc));
    layout.push_back({static_cast<uint32_t>(8 * i), 8});
    words[8 * i] = 0x10000 * (i + 1) + i;
  }
  layout.push_back({40, 8});
  words[40] = 0x10000;  // back into the first allocation
  size_t ignored = 99;
  auto t = deepTargets(layout, packWords(48, words), map, 3, uint64_t{1} << 34, &ignored);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].args, "arg0,arg5");
  EXPECT_EQ(t[1].args, "arg1");
  EXPECT_EQ(t[2].args, "arg2");
  EXPECT_EQ(ignored, 2u);  // arg3 and arg4: counted, not dropped unseen
  EXPECT_TRUE(
      deepTargets(layout, packWords(48, words), map, 0, uint64_t{1} << 34, &ignored).empty());
  EXPECT_EQ(ignored, 6u);
  deepTargets(layout, packWords(48, words), map, 64, uint64_t{1} << 34, &ignored);
  EXPECT_EQ(ignored, 0u);
}

// Brute force over a list of allocations (no merging: the random allocations are not kMapped).
std::vector<DeepTarget> referenceTargets(const std::vector<ParamInfo>& layout,
                                         const std::vector<uint8_t>& packed,
                                         const std::vector<Allocation>& allocs, size_t max_targets,
                                         size_t& ignored) {
  ignored = 0;
  std::vector<DeepTarget> out;
  uint64_t previous_end = 0;  // the end of the allocation the last pointer word found points into
  for (size_t i = 0; i < layout.size(); ++i) {
    for (size_t off = 0; off + 8 <= layout[i].size; off += 8) {
      uint64_t w = 0;
      std::memcpy(&w, packed.data() + layout[i].offset + off, 8);
      for (const Allocation& a : allocs) {
        if (w < a.base || w >= a.base + a.size) continue;
        std::string name = off ? fmt::format("arg{}+{}", i, off) : fmt::format("arg{}", i);
        if (w == a.base && w == previous_end) name += "?";  // perhaps the previous one's end
        previous_end = a.base + a.size;
        auto it = std::find_if(out.begin(), out.end(), [&](const DeepTarget& t) { return t.alloc == a; });
        if (it != out.end()) {
          it->args += "," + name;
        } else if (out.size() < max_targets) {
          out.push_back({a, name});
        } else {
          ++ignored;
        }
      }
    }
  }
  return out;
}

TEST(DeepTargets, RandomLayoutsAndAllocationsMatchABruteForceSearch) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  const AllocKind kinds[] = {AllocKind::kMalloc, AllocKind::kAsync, AllocKind::kIpc,
                             AllocKind::kManaged, AllocKind::kOther};
  int64_t found = 0;
  for (int round = 0; round < 300; ++round) {
    AllocationMap map;
    std::vector<Allocation> allocs;
    uint64_t at = uint64_t{1} << 40;
    for (int i = 0, n = static_cast<int>(rng.range(0, 30)); i < n; ++i) {
      // Often right after the previous one: a one-past-the-end word then lands on this one.
      if (rng.range(0, 1)) at += static_cast<uint64_t>(rng.range(0, 1 << 20));
      Allocation a{at, static_cast<uint64_t>(rng.range(1, 1 << 24)), kinds[rng.range(0, 4)]};
      ASSERT_TRUE(map.add(a.base, a.size, a.kind));
      allocs.push_back(a);
      at += a.size;
    }
    // Words: pointers inside (base, last byte, anywhere), one past the end, junk; at every 4-byte
    // position, so that unaligned pointers are present too.
    std::vector<ParamInfo> layout = randomLayout(rng, 24);
    size_t bytes = 0;
    for (const ParamInfo& p : layout) bytes = std::max<size_t>(bytes, p.offset + p.size);
    std::vector<std::vector<uint8_t>> values;
    std::vector<void*> ptrs;
    for (const ParamInfo& p : layout) {
      std::vector<uint8_t>& v = values.emplace_back(p.size, 0);
      for (size_t off = 0; off + 8 <= v.size(); off += rng.range(0, 3) ? 8u : 4u) {
        uint64_t w = rng.u64();
        if (!allocs.empty() && rng.range(0, 2)) {
          const Allocation& a = allocs[static_cast<size_t>(rng.range(0, static_cast<int64_t>(allocs.size()) - 1))];
          switch (rng.range(0, 3)) {
            case 0: w = a.base; break;
            case 1: w = a.base + a.size - 1; break;
            case 2: w = a.base + a.size; break;
            default: w = a.base + static_cast<uint64_t>(rng.range(0, static_cast<int64_t>(a.size) - 1));
          }
        } else if (rng.range(0, 1)) {
          w = static_cast<uint64_t>(rng.range(0, 4096));
        }
        std::memcpy(v.data() + off, &w, 8);
      }
    }
    for (auto& v : values) ptrs.push_back(v.data());
    std::vector<uint8_t> packed = packParams(layout, ptrs.data());
    ASSERT_EQ(packed.size(), bytes);
    size_t max_targets = rng.range(0, 3) ? 64 : static_cast<size_t>(rng.range(0, 4));
    size_t ignored = 0, expected_ignored = 0;
    std::vector<DeepTarget> got =
        deepTargets(layout, packed, map, max_targets, uint64_t{1} << 34, &ignored);
    ASSERT_EQ(got, referenceTargets(layout, packed, allocs, max_targets, expected_ignored))
        << "round " << round << " layout " << layoutText(layout);
    ASSERT_EQ(ignored, expected_ignored) << "round " << round;
    found += static_cast<int64_t>(got.size());
  }
  EXPECT_GT(found, 0);
}

// Random runs of contiguous mapped pieces, words into them and a random merge cap: the targets
// never overlap, each word's extent (AllocationMap::find) lies inside the one target that names it,
// and each target is exactly the span of its words' extents.
TEST(DeepTargets, RandomMappedRunsGiveDisjointTargetsEachTheSpanOfItsWordsExtents) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  constexpr uint64_t kMiB = 1 << 20;
  for (int round = 0; round < 300; ++round) {
    AllocationMap map;
    std::vector<Allocation> pieces;
    uint64_t at = uint64_t{1} << 40;
    for (int run = 0, runs = static_cast<int>(rng.range(1, 4)); run < runs; ++run) {
      if (rng.range(0, 2))
        at += static_cast<uint64_t>(rng.range(1, 64)) * kMiB;  // else adjacent runs
      for (int i = 0, n = static_cast<int>(rng.range(1, 8)); i < n; ++i) {
        Allocation a{at, static_cast<uint64_t>(rng.range(1, 64)) * kMiB, AllocKind::kMapped};
        ASSERT_TRUE(map.add(a.base, a.size, a.kind));
        pieces.push_back(a);
        at += a.size;
      }
    }
    const uint64_t cap = static_cast<uint64_t>(rng.range(1, 300)) * kMiB;
    const size_t nwords = static_cast<size_t>(rng.range(1, 12));
    std::vector<ParamInfo> layout;
    std::map<size_t, uint64_t> words;
    for (size_t i = 0; i < nwords; ++i) {
      layout.push_back({static_cast<uint32_t>(8 * i), 8});
      const Allocation& p =
          pieces[static_cast<size_t>(rng.range(0, static_cast<int64_t>(pieces.size()) - 1))];
      words[8 * i] =
          rng.range(0, 3)
              ? p.base + static_cast<uint64_t>(rng.range(0, static_cast<int64_t>(p.size) - 1))
              : p.base;
    }
    std::vector<DeepTarget> got = deepTargets(layout, packWords(8 * nwords, words), map, 64, cap);
    SCOPED_TRACE(fmt::format("round {}, cap {} MiB, {} words", round, cap / kMiB, nwords));
    for (size_t i = 0; i < got.size(); ++i) {
      for (size_t j = i + 1; j < got.size(); ++j) {
        const Allocation &x = got[i].alloc, &y = got[j].alloc;
        EXPECT_FALSE(x.base < y.base + y.size && y.base < x.base + x.size)
            << "targets " << i << " and " << j;
      }
    }
    std::vector<uint64_t> lo(got.size(), UINT64_MAX), hi(got.size(), 0);
    for (const auto& [offset, w] : words) {
      const std::string name = fmt::format("arg{}", offset / 8);
      const Allocation e = *map.find(w, cap);
      int named = 0;
      for (size_t t = 0; t < got.size(); ++t) {
        std::string args = "," + got[t].args + ",";
        if (args.find("," + name + ",") == std::string::npos &&
            args.find("," + name + "?,") == std::string::npos)
          continue;
        ++named;
        EXPECT_GE(e.base, got[t].alloc.base) << name;
        EXPECT_LE(e.base + e.size, got[t].alloc.base + got[t].alloc.size) << name;
        lo[t] = std::min(lo[t], e.base);
        hi[t] = std::max(hi[t], e.base + e.size);
      }
      EXPECT_EQ(named, 1) << name;
    }
    for (size_t t = 0; t < got.size(); ++t) {
      EXPECT_EQ(got[t].alloc.base, lo[t]) << "target " << t;
      EXPECT_EQ(got[t].alloc.base + got[t].alloc.size, hi[t]) << "target " << t;
    }
  }
}

// ---- layout text ---------------------------------------------------------------------------------

TEST(LayoutText, RoundTripsRandomLayouts) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  EXPECT_EQ(layoutText({}), "[]");
  EXPECT_EQ(layoutText({{0, 8}, {8, 4}}), "[[0,8],[8,4]]");
  for (int round = 0; round < 500; ++round) {
    std::vector<ParamInfo> layout;
    for (int i = 0, n = static_cast<int>(rng.range(0, 30)); i < n; ++i) {
      layout.push_back({static_cast<uint32_t>(rng.u64()), static_cast<uint32_t>(rng.range(0, 1 << 15))});
    }
    auto back = parseLayoutText(layoutText(layout));
    ASSERT_TRUE(back.has_value()) << layoutText(layout);
    EXPECT_EQ(*back, layout);
  }
  auto spaced = parseLayoutText(" [ [ 0 , 8 ] ,\n[8,4]\t] ");
  ASSERT_TRUE(spaced.has_value());
  EXPECT_EQ(*spaced, (std::vector<ParamInfo>{{0, 8}, {8, 4}}));
  EXPECT_EQ(parseLayoutText("[]"), std::vector<ParamInfo>{});
  EXPECT_EQ(parseLayoutText("[[4294967295,0]]"), (std::vector<ParamInfo>{{UINT32_MAX, 0}}));
}

TEST(LayoutText, MalformedInputIsRefused) {
  for (const char* bad : {"", " ", "[", "]", "[[0,8]", "[[0,8],]", "[[0,8]]x", "[[0]]",
                          "[[0,8,1]]", "[[-1,8]]", "[[0,4294967296]]", "[[0x10,8]]", "[[1.5,8]]",
                          "[[+1,8]]", "[0,8]", "[[0,8][8,4]]", "{}", "[[,]]", "[,]", "[[0,8]],",
                          "[[0 8]]", "null", "[[0,8]]]", "[[\"0\",8]]"}) {
    EXPECT_FALSE(parseLayoutText(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(LayoutText, MutatedTextIsRefusedOrReadsAsAWellFormedLayout) {
  Rng rng;
  SCOPED_TRACE(fmt::format("seed {}", rng.seed()));
  const std::string alphabet = "[],0123456789 -x";
  int refused = 0;
  for (int round = 0; round < 2000; ++round) {
    std::vector<ParamInfo> layout;
    for (int i = 0, n = static_cast<int>(rng.range(1, 6)); i < n; ++i) {
      layout.push_back({static_cast<uint32_t>(rng.range(0, 999)), static_cast<uint32_t>(rng.range(0, 99))});
    }
    std::string text = layoutText(layout);
    size_t at = static_cast<size_t>(rng.range(0, static_cast<int64_t>(text.size()) - 1));
    switch (rng.range(0, 2)) {
      case 0: text[at] = alphabet[static_cast<size_t>(rng.range(0, static_cast<int64_t>(alphabet.size()) - 1))]; break;
      case 1: text.erase(at, 1); break;
      default: text.insert(at, 1, alphabet[static_cast<size_t>(rng.range(0, static_cast<int64_t>(alphabet.size()) - 1))]);
    }
    auto parsed = parseLayoutText(text);
    if (!parsed) {
      ++refused;
      continue;
    }
    // Accepted only if it still was a layout: printing it again gives the text minus whitespace.
    std::string squeezed = text;
    std::erase(squeezed, ' ');
    auto again = parseLayoutText(layoutText(*parsed));
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(*again, *parsed);
    EXPECT_EQ(std::count(squeezed.begin(), squeezed.end(), '['),
              static_cast<std::ptrdiff_t>(parsed->size()) + 1)
        << text;
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace detrace::tracer
