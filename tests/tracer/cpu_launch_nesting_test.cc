// LaunchNesting (launch_nesting.h): which launch a CUPTI launch callback belongs to, and which exit
// closes a graph launch opened for the fingerprinter, fed the callback sequences CUPTI delivers,
// with and without the exits a stop cuts off (the runtime's launch callbacks go off at a stop, the
// driver's graph launch callbacks stay on), and a few it should not (stale exits).
#include <vector>

#include <gtest/gtest.h>

#include "detrace/tracer/callback_repeats.h"
#include "detrace/tracer/launch_nesting.h"

namespace detrace::tracer {
namespace {

constexpr bool kRuntime = true, kDriver = false;
constexpr bool kGraph = true, kPlain = false;

// What the CUPTI adapter does at a launch's enter: a driver half only joins its runtime launch;
// anything else begins a launch, and a graph launch may be opened for the fingerprinter. True when
// the callback began a launch of its own.
bool enter(LaunchNesting& n, bool runtime, bool graph, uint64_t token = 0, bool opens = false) {
  if (!runtime && n.driverHalf(graph)) return false;
  n.enter(runtime, token, graph);
  if (opens) n.openGraph(runtime);
  return true;
}

TEST(LaunchNesting, ARuntimeGraphLaunchClosesAtItsDriverHalfsExit) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kRuntime, kGraph, 5, /*opens=*/true));
  EXPECT_FALSE(enter(n, kDriver, kGraph)) << "cuGraphLaunch under cudaGraphLaunch is its half";
  LaunchNesting::Exit driver = n.exit(kDriver, kGraph);
  EXPECT_TRUE(driver.close_graph) << "the graph is queued once the driver half returns";
  EXPECT_EQ(driver.token, 0u);
  LaunchNesting::Exit runtime = n.exit(kRuntime, kGraph);
  EXPECT_FALSE(runtime.close_graph) << "closed once only";
  EXPECT_EQ(runtime.token, 5u);
  EXPECT_EQ(n.depth(), 0);
}

// The common case: one cudaGraphLaunch after another, each with its driver half.
TEST(LaunchNesting, RuntimeGraphLaunchesInARowEachHaveTheirDriverHalf) {
  LaunchNesting n;
  for (uint64_t token : {5u, 6u, 7u}) {
    EXPECT_TRUE(enter(n, kRuntime, kGraph, token, /*opens=*/true));
    EXPECT_FALSE(enter(n, kDriver, kGraph)) << "launch " << token << "'s driver half";
    LaunchNesting::Exit driver = n.exit(kDriver, kGraph);
    EXPECT_TRUE(driver.close_graph);
    EXPECT_EQ(driver.token, 0u);
    LaunchNesting::Exit runtime = n.exit(kRuntime, kGraph);
    EXPECT_FALSE(runtime.close_graph);
    EXPECT_EQ(runtime.token, token);
  }
  EXPECT_EQ(n.depth(), 0);
}

// Plain launches alternate with graph launches, in both APIs: each exit names its own launch's
// slot, never an earlier one's.
TEST(LaunchNesting, EachExitNamesItsOwnLaunchsSlot) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kDriver, kPlain, 11));
  EXPECT_EQ(n.exit(kDriver, kPlain).token, 11u);
  EXPECT_TRUE(enter(n, kRuntime, kPlain, 12));
  EXPECT_FALSE(enter(n, kDriver, kPlain));
  EXPECT_EQ(n.exit(kDriver, kPlain).token, 0u) << "a driver half has no slot of its own";
  EXPECT_EQ(n.exit(kRuntime, kPlain).token, 12u);
  // A runtime exit whose enter began nothing (a launch captured into a graph returns before)
  // names no slot: a failure there must not mark launch 12 failed.
  EXPECT_EQ(n.exit(kRuntime, kPlain).token, 0u);
  EXPECT_TRUE(enter(n, kDriver, kGraph, 13, /*opens=*/true));
  EXPECT_EQ(n.exit(kDriver, kGraph).token, 13u);
  EXPECT_EQ(n.exit(kDriver, kGraph).token, 0u) << "a driver exit without an enter names no slot";
}

TEST(LaunchNesting, ARuntimeGraphLaunchWithoutADriverHalfClosesAtItsOwnExit) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kRuntime, kGraph, 5, /*opens=*/true));
  EXPECT_TRUE(n.exit(kRuntime, kGraph).close_graph);
}

TEST(LaunchNesting, APlainRuntimeLaunchsDriverHalfAddsNothing) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kRuntime, kPlain, 3));
  EXPECT_FALSE(enter(n, kDriver, kPlain)) << "cuLaunchKernel under cudaLaunchKernel is its half";
  LaunchNesting::Exit driver = n.exit(kDriver, kPlain);
  EXPECT_EQ(driver.token, 0u);
  EXPECT_FALSE(driver.close_graph);
  EXPECT_EQ(n.exit(kRuntime, kPlain).token, 3u);
  EXPECT_EQ(n.depth(), 0);
}

TEST(LaunchNesting, ADriverLaunchOutsideARuntimeOneIsItsOwn) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kDriver, kGraph, 9, /*opens=*/true));
  LaunchNesting::Exit e = n.exit(kDriver, kGraph);
  EXPECT_EQ(e.token, 9u);
  EXPECT_TRUE(e.close_graph);
}

// A stop between the driver half's exit and the runtime's exit: the runtime exit never comes.
// The thread's next cuGraphLaunch (paused: cudaGraphLaunch is seen only through it) is a launch of
// its own, ordered and closed; before, it passed for a driver half and was neither.
TEST(LaunchNesting, ARuntimeGraphLaunchCutShortByAStopLeavesTheNextDriverGraphLaunchItsOwn) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kRuntime, kGraph, 5, /*opens=*/true));
  EXPECT_FALSE(enter(n, kDriver, kGraph));
  EXPECT_TRUE(n.exit(kDriver, kGraph).close_graph);
  // (the runtime's exit is lost)
  for (uint64_t token : {7u, 0u, 0u}) {
    EXPECT_TRUE(enter(n, kDriver, kGraph, token, /*opens=*/true));
    LaunchNesting::Exit e = n.exit(kDriver, kGraph);
    EXPECT_TRUE(e.close_graph);
    EXPECT_EQ(e.token, token);
  }
}

TEST(LaunchNesting, APlainRuntimeLaunchCutShortLeavesTheNextDriverGraphLaunchItsOwn) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kRuntime, kPlain, 3));
  // (its exit is lost: the runtime's callbacks went off)
  EXPECT_TRUE(enter(n, kDriver, kGraph, 0, /*opens=*/true));
  EXPECT_TRUE(n.exit(kDriver, kGraph).close_graph);
  EXPECT_EQ(n.depth(), 0);
}

TEST(LaunchNesting, AnExitOfAnotherKindNeverClosesTheOpenGraphLaunch) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kRuntime, kGraph, 5, /*opens=*/true));
  EXPECT_FALSE(n.exit(kDriver, kPlain).close_graph) << "a plain driver exit is not the graph's";
  EXPECT_TRUE(n.exit(kRuntime, kGraph).close_graph);
  // Opened at a driver enter: a runtime exit (a stale one) does not close it, its own exit does.
  EXPECT_TRUE(enter(n, kDriver, kGraph, 9, /*opens=*/true));
  EXPECT_FALSE(n.exit(kRuntime, kPlain).close_graph);
  EXPECT_TRUE(n.exit(kDriver, kGraph).close_graph);
}

// A capture start forgets the nesting a cut-off launch left (its depth, its slot), but not the
// graph launch still open: its callbacks stayed on, so its exit still comes and closes it.
TEST(LaunchNesting, AStartForgetsCutLaunchesButNotTheOpenGraphLaunch) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kRuntime, kPlain, 3));
  EXPECT_TRUE(enter(n, kRuntime, kGraph, 5, /*opens=*/true));
  EXPECT_EQ(n.depth(), 2);
  n.reset();
  EXPECT_EQ(n.depth(), 0);
  EXPECT_EQ(n.runtimeToken(), 0u);
  LaunchNesting::Exit e = n.exit(kRuntime, kGraph);
  EXPECT_TRUE(e.close_graph);
  EXPECT_EQ(e.token, 0u) << "the slot was forgotten";
  EXPECT_EQ(n.depth(), 0) << "never below zero";
  EXPECT_TRUE(enter(n, kDriver, kPlain)) << "nothing nests after a start";
}

TEST(LaunchNesting, TheFastPathsRuntimeExitOnlyLeaves) {
  LaunchNesting n;
  EXPECT_TRUE(enter(n, kRuntime, kPlain));
  EXPECT_FALSE(enter(n, kDriver, kPlain));
  n.leaveRuntime();
  EXPECT_EQ(n.depth(), 0);
  n.leaveRuntime();
  EXPECT_EQ(n.depth(), 0);
  EXPECT_TRUE(enter(n, kDriver, kPlain));
}

// CallbackRepeats (callback_repeats.h): a callback equal to the thread's last one is a repeat;
// anything that differs (domain, callback, site, correlation id) is not.
TEST(CallbackRepeats, OnlyTheSameCallbackRightAgainIsARepeat) {
  constexpr uint32_t kRt = 1, kDrv = 2, kEnter = 0, kExit = 1, kGraphLaunch = 311;
  CallbackRepeats f;
  EXPECT_FALSE(f.repeated(kRt, kGraphLaunch, kEnter, 149));
  EXPECT_TRUE(f.repeated(kRt, kGraphLaunch, kEnter, 149));
  EXPECT_TRUE(f.repeated(kRt, kGraphLaunch, kEnter, 149)) << "as often as it comes";
  EXPECT_FALSE(f.repeated(kDrv, kGraphLaunch, kEnter, 149)) << "another domain";
  EXPECT_FALSE(f.repeated(kDrv, kGraphLaunch, kExit, 149)) << "another site";
  EXPECT_FALSE(f.repeated(kRt, kGraphLaunch, kExit, 149));
  EXPECT_FALSE(f.repeated(kRt, kGraphLaunch, kExit, 150)) << "another call";
  EXPECT_FALSE(f.repeated(kRt, kGraphLaunch + 1, kExit, 150)) << "another callback";
  CallbackRepeats fresh;
  EXPECT_FALSE(fresh.repeated(kRt, kGraphLaunch, kEnter, 7)) << "the first callback is never a repeat";
  EXPECT_FALSE(fresh.repeated(kRt, kGraphLaunch, kEnter, 0));
  EXPECT_FALSE(fresh.repeated(kRt, kGraphLaunch, kEnter, 0)) << "no correlation id: two calls may look alike";
}

// The sequence an H100 delivered after a start re-enabled the runtime's graph launch callbacks
// (runtime enter twice, the driver half once, runtime exit twice), with the tracer's own digest
// launch (cuLaunchKernel, its callbacks nested in the handling of the runtime enter and exit, as
// where driver launch callbacks are on), filtered as the adapter does: one launch, opened once and
// closed once by its driver half. Unfiltered, each launch began twice; filtered without telling
// nested callbacks apart, the own launch's callbacks came between the two copies and hid the repeat.
TEST(CallbackRepeats, ARepeatedRuntimeGraphLaunchIsOneLaunch) {
  constexpr uint32_t kRt = 1, kDrv = 2, kGraphCb = 311, kLaunchCb = 307;
  struct Callback {
    bool runtime, enter;
    uint32_t correlation;
  };
  std::vector<Callback> delivered;
  for (uint32_t launch : {149u, 152u}) {  // the runtime call's id; its driver half's and own launch's follow
    for (bool enter_site : {true, false}) {
      const Callback runtime{kRuntime, enter_site, launch};
      if (enter_site) {
        delivered.insert(delivered.end(), {runtime, runtime, {kDriver, true, launch + 1}});
      } else {
        delivered.insert(delivered.end(), {{kDriver, false, launch + 1}, runtime, runtime});
      }
    }
  }
  auto run = [&](bool filtered, bool tell_nested) {
    LaunchNesting n;
    CallbackRepeats f;
    int begun = 0, closed = 0;
    for (const Callback& c : delivered) {
      const uint32_t site = c.enter ? 0 : 1;
      if (filtered && f.begin(true, c.runtime ? kRt : kDrv, kGraphCb, site, c.correlation)) continue;
      if (c.enter) {
        begun += enter(n, c.runtime, kGraph, c.correlation, /*opens=*/true) ? 1 : 0;
      } else {
        closed += n.exit(c.runtime, kGraph).close_graph ? 1 : 0;
      }
      if (c.runtime && filtered) {  // the tracer's digest launch inside the runtime callback
        for (uint32_t own_site : {0u, 1u}) {
          if (tell_nested) {
            EXPECT_FALSE(f.begin(true, kDrv, kLaunchCb, own_site, 9000 + c.correlation));
            f.end();
          } else {
            (void)f.repeated(kDrv, kLaunchCb, own_site, 9000 + c.correlation);
          }
        }
      }
      if (filtered) f.end();
    }
    EXPECT_EQ(closed, 2);
    return begun;
  };
  EXPECT_EQ(run(/*filtered=*/true, /*tell_nested=*/true), 2) << "two launches, each begun once";
  EXPECT_EQ(run(/*filtered=*/false, false), 4) << "what the tracer did before: each launch begun twice";
  EXPECT_EQ(run(/*filtered=*/true, /*tell_nested=*/false), 4) << "the own launch hides the repeat";
}

// Callbacks of other domains (resources, NVTX) are never repeats, and what they nest is not
// looked at either.
TEST(CallbackRepeats, OtherDomainsAndWhatTheyNestAreLeftAlone) {
  CallbackRepeats f;
  EXPECT_FALSE(f.begin(false, 3, 1, 0, 0));
  EXPECT_FALSE(f.begin(true, 1, 311, 0, 5)) << "nested";
  f.end();
  EXPECT_FALSE(f.begin(true, 1, 311, 0, 5)) << "nested again: not remembered";
  f.end();
  f.end();
  EXPECT_FALSE(f.begin(false, 3, 1, 0, 0)) << "a second resource callback alike";
  f.end();
  EXPECT_FALSE(f.begin(true, 1, 311, 0, 5));
  f.end();
  EXPECT_TRUE(f.begin(true, 1, 311, 0, 5)) << "now at the top: a repeat";
}

}  // namespace
}  // namespace detrace::tracer
