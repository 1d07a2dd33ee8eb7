// Look-back deep windows (kernel:NAME@N-B): a WindowGate and a LookBack driven the way the CUPTI
// adapter drives them. Every launch gets a ticket and LookBack::issued() sees it; only some
// launches are then begun (fingerprinted, their results held): a launch captured into a CUDA
// graph, outside --window or a graph launch never is. The held launches must be decided as soon
// as the window opens, by the opening launch's index, whatever becomes of that launch.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "detrace/tracer/capture_policy.h"
#include "detrace/tracer/look_back.h"
#include "detrace/tracer/window_gate.h"

#include "../db/test_util.h"

namespace detrace::tracer {
namespace {

// What the fingerprinter would do with each token: held until a verdict comes.
struct Results {
  std::set<uint64_t> held, kept, dropped;

  void apply(const LookBack::Verdicts& v) {
    for (uint64_t t : v.keep) {
      EXPECT_EQ(held.erase(t), 1u) << "token " << t << " kept but not held";
      kept.insert(t);
    }
    for (uint64_t t : v.drop) {
      EXPECT_EQ(held.erase(t), 1u) << "token " << t << " dropped but not held";
      dropped.insert(t);
    }
  }
};

// One launch as the adapter makes it: the gate's ticket, seen by the look-back, then (if `begun`)
// the deep launch path, which holds a speculative launch's results. Returns the ticket.
WindowGate::LaunchTicket launch(WindowGate& gate, LookBack& lb, Results& r, const char* name,
                                uint64_t token, bool begun = true) {
  WindowGate::LaunchTicket t = gate.admitLaunchTicket(name);
  r.apply(lb.issued(t));
  if (begun && t.record && t.speculative) {
    r.held.insert(token);
    r.apply(lb.began(token, t.index));
  }
  return t;
}

RecordWindow window(const std::string& text) {
  auto w = parseWindow(text);
  EXPECT_TRUE(w.isOk()) << text;
  return *w;
}

TEST(LookBack, AnOpeningLaunchThatIsNeverFingerprintedStillDecidesWhatIsHeld) {
  RecordWindow w = window("kernel:opener@0-2+1");
  WindowGate gate(w);
  LookBack lb(w.before);
  Results r;
  launch(gate, lb, r, "_Z4fillPh", 10);  // index 0
  launch(gate, lb, r, "_Z4fillPh", 11);  // 1
  launch(gate, lb, r, "_Z4fillPh", 12);  // 2: 10 is more than B before anything still to come
  EXPECT_EQ(r.dropped, (std::set<uint64_t>{10}));
  EXPECT_EQ(lb.held(), 2u);
  // The opening launch is captured into a graph (never begun), the next one is a graph launch
  // and the one after that is past the window: no deep launch follows the opening.
  WindowGate::LaunchTicket opening = launch(gate, lb, r, "_Z6openerPh", 13, /*begun=*/false);
  EXPECT_TRUE(opening.record);
  EXPECT_FALSE(opening.speculative);
  EXPECT_EQ(opening.opened_at, 3);
  launch(gate, lb, r, nullptr, 14, /*begun=*/false);
  EXPECT_FALSE(launch(gate, lb, r, "_Z4fillPh", 15).record);
  // Nothing waits any more: the two launches before the opening one are kept.
  EXPECT_TRUE(r.held.empty()) << r.held.size() << " launches still held";
  EXPECT_EQ(lb.held(), 0u);
  EXPECT_EQ(r.kept, (std::set<uint64_t>{11, 12}));
  EXPECT_EQ(lb.openedAt(), 3);
}

TEST(LookBack, TheLaunchesKeptAreCountedFromTheOpeningLaunchNotTheFirstFingerprintedAfterIt) {
  RecordWindow w = window("kernel:opener@0-2+2");
  WindowGate gate(w);
  LookBack lb(w.before);
  Results r;
  for (uint64_t token = 10; token < 13; ++token) launch(gate, lb, r, "_Z4fillPh", token);  // 0..2
  launch(gate, lb, r, "_Z6openerPh", 13, /*begun=*/false);               // 3: captured
  WindowGate::LaunchTicket next = launch(gate, lb, r, "_Z4fillPh", 14);  // 4: a deep launch
  EXPECT_TRUE(next.record);
  EXPECT_FALSE(next.speculative);
  // Launches 1 and 2 are the two before launch 3; counting from launch 4 would keep launch 2 only.
  EXPECT_EQ(r.kept, (std::set<uint64_t>{11, 12}));
  EXPECT_EQ(r.dropped, (std::set<uint64_t>{10}));
  EXPECT_TRUE(r.held.empty());
}

TEST(LookBack, ALaunchAdmittedBeforeTheOpeningButBegunAfterItIsDecidedAtOnce) {
  RecordWindow w = window("kernel:opener@0-1+4");
  WindowGate gate(w);
  LookBack lb(w.before);
  Results r;
  // Another thread's launches take their tickets before the window opens and begin after it.
  WindowGate::LaunchTicket old = gate.admitLaunchTicket("_Z4fillPh");   // 0
  WindowGate::LaunchTicket late = gate.admitLaunchTicket("_Z4fillPh");  // 1
  ASSERT_TRUE(old.speculative && late.speculative);
  r.apply(lb.issued(old));
  r.apply(lb.issued(late));
  launch(gate, lb, r, "_Z6openerPh", 12);  // 2: opens, begun (not speculative: nothing held)
  EXPECT_TRUE(r.held.empty());
  r.held.insert(10);
  r.apply(lb.began(10, old.index));  // two launches before the opening one: past B
  r.held.insert(11);
  r.apply(lb.began(11, late.index));  // just before it: kept
  EXPECT_EQ(r.dropped, (std::set<uint64_t>{10}));
  EXPECT_EQ(r.kept, (std::set<uint64_t>{11}));
  EXPECT_TRUE(r.held.empty());
  EXPECT_EQ(lb.held(), 0u);
}

TEST(LookBack, AWindowThatNeverOpensHoldsAtMostBAndDropAllReleasesThem) {
  RecordWindow w = window("kernel:opener@0-3");
  WindowGate gate(w);
  LookBack lb(w.before);
  Results r;
  for (uint64_t token = 100; token < 110; ++token) launch(gate, lb, r, "_Z4fillPh", token);
  EXPECT_EQ(lb.held(), 3u);
  EXPECT_EQ(r.held, (std::set<uint64_t>{107, 108, 109}));  // the three latest
  EXPECT_EQ(r.dropped.size(), 7u);
  EXPECT_TRUE(r.kept.empty());
  r.apply(lb.dropAll());  // recording stops: nothing may wait for the window
  EXPECT_TRUE(r.held.empty());
  EXPECT_EQ(lb.held(), 0u);
  EXPECT_EQ(lb.openedAt(), -1);
  // Still closed: later launches are held again, and the window may still open for them.
  launch(gate, lb, r, "_Z4fillPh", 110);
  EXPECT_EQ(r.held, (std::set<uint64_t>{110}));
  launch(gate, lb, r, "_Z6openerPh", 111, /*begun=*/false);
  EXPECT_EQ(r.kept, (std::set<uint64_t>{110}));
  EXPECT_TRUE(r.held.empty());
}

TEST(LookBack, TicketsThatAreNotSpeculativeBeforeTheWindowOpensDecideNothing) {
  // A window without a look-back, or another kind of window: no ticket is speculative, and none
  // names an opening until a kernel window opens.
  for (const char* text : {"kernel:opener@1", "launches:2:5"}) {
    SCOPED_TRACE(text);
    RecordWindow w = window(text);
    WindowGate gate(w);
    LookBack lb(2);
    for (const char* name : {"_Z6openerPh", "_Z4fillPh", "_Z4fillPh"}) {
      WindowGate::LaunchTicket t = gate.admitLaunchTicket(name);
      EXPECT_FALSE(t.speculative);
      EXPECT_EQ(t.opened_at, -1);
      LookBack::Verdicts v = lb.issued(t);
      EXPECT_TRUE(v.keep.empty() && v.drop.empty());
    }
    EXPECT_EQ(lb.openedAt(), -1);
  }
}

// Many threads launch at once, some launches never begun; one thread's launch opens the window.
// Every begun launch gets exactly one verdict, none is left held, and none is kept that lies more
// than B launches before the opening one.
TEST(LookBack, ConcurrentLaunchesEachGetOneVerdictAndNothingStaysHeld) {
  testing::Rng rng;
  SCOPED_TRACE(::testing::Message() << "seed " << rng.seed());
  constexpr int kThreads = 6, kLaunches = 2000;
  const int64_t before = rng.range(1, 40);
  const int opener_thread = static_cast<int>(rng.range(0, kThreads - 1));
  const int opener_at = static_cast<int>(rng.range(100, kLaunches - 100));
  RecordWindow w = window("kernel:opener@0-" + std::to_string(before) + "+8");
  WindowGate gate(w);
  LookBack lb(before);
  std::mutex mu;
  std::map<uint64_t, int64_t> begun;  // token -> index
  std::map<uint64_t, int> verdicts;   // token -> how many it got
  std::set<uint64_t> kept;
  auto record = [&](const LookBack::Verdicts& v) {
    std::lock_guard lk(mu);
    for (uint64_t t : v.keep) {
      ++verdicts[t];
      kept.insert(t);
    }
    for (uint64_t t : v.drop) ++verdicts[t];
  };
  std::vector<uint32_t> seeds;
  for (int i = 0; i < kThreads; ++i) seeds.push_back(static_cast<uint32_t>(rng.range(0, 1 << 30)));
  std::vector<std::thread> threads;
  std::atomic<uint64_t> next_token{1};
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      uint32_t x = seeds[th] | 1;
      for (int i = 0; i < kLaunches; ++i) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        const bool opens = th == opener_thread && i == opener_at;
        WindowGate::LaunchTicket t = gate.admitLaunchTicket(opens ? "_Z6openerPh" : "_Z4fillPh");
        record(lb.issued(t));
        if (!t.speculative || x % 4 == 0) continue;  // not held, or never begun (captured, ...)
        const uint64_t token = next_token.fetch_add(1);
        {
          std::lock_guard lk(mu);
          begun[token] = t.index;
        }
        record(lb.began(token, t.index));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const int64_t opened = lb.openedAt();
  ASSERT_GE(opened, 0);
  EXPECT_EQ(lb.held(), 0u);
  for (const auto& [token, index] : begun) {
    EXPECT_EQ(verdicts[token], 1) << "token " << token << " (launch " << index << ")";
    if (kept.count(token)) {
      EXPECT_GE(index, opened - before) << "token " << token;
    }
  }
  EXPECT_EQ(verdicts.size(), begun.size());  // no verdict for a token never begun
}

}  // namespace
}  // namespace detrace::tracer
