// NameCache: a kernel name's id without a lock on repeat lookups, and never a wrong id when a
// name pointer is reused for another text or two caches (two writers) are in use.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "detrace/tracer/name_cache.h"

namespace detrace::tracer {
namespace {

TEST(NameCache, InternsEachTextOnceAndAnswersRepeatsLocally) {
  NameCache cache;
  int interned = 0;
  auto intern = [&](const char*) { return static_cast<int64_t>(100 + interned++); };
  std::string a = "kernel_a", b = "kernel_b";
  EXPECT_EQ(cache.lookup(a.c_str(), intern), 100);
  EXPECT_EQ(cache.lookup(b.c_str(), intern), 101);
  uint64_t hits = NameCache::localHits();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(cache.lookup(a.c_str(), intern), 100);
    EXPECT_EQ(cache.lookup(b.c_str(), intern), 101);
  }
  EXPECT_EQ(interned, 2);
  EXPECT_EQ(NameCache::localHits() - hits, 20u);
  // The same text at another address: the shared map answers, no new id.
  std::string a2 = "kernel_a";
  EXPECT_EQ(cache.lookup(a2.c_str(), intern), 100);
  EXPECT_EQ(interned, 2);
}

TEST(NameCache, AReusedPointerWithAnotherTextGetsItsOwnId) {
  NameCache cache;
  int interned = 0;
  auto intern = [&](const char*) { return static_cast<int64_t>(interned++); };
  char buf[32];
  std::strcpy(buf, "first_kernel");
  EXPECT_EQ(cache.lookup(buf, intern), 0);
  std::strcpy(buf, "second_kernel");  // a module unloaded, another loaded at the same address
  EXPECT_EQ(cache.lookup(buf, intern), 1);
  std::strcpy(buf, "first_kernel");
  EXPECT_EQ(cache.lookup(buf, intern), 0);
}

TEST(NameCache, AHandleNamesItsKernelUntilModulesAreUnloaded) {
  NameCache cache;
  int interned = 0;
  auto intern = [&](const char*) { return static_cast<int64_t>(interned++); };
  int f1 = 0, f2 = 0;  // two launched functions' handles
  char buf[32];
  std::strcpy(buf, "kernel_one");
  EXPECT_EQ(cache.lookupByHandle(&f1, buf, intern), 0);
  std::strcpy(buf, "kernel_two");
  EXPECT_EQ(cache.lookupByHandle(&f2, buf, intern), 1);
  // A repeat launch is answered by its handle alone: the text is not read (here it even lies).
  const uint64_t hits = NameCache::localHits();
  EXPECT_EQ(cache.lookupByHandle(&f1, buf, intern), 0);
  EXPECT_EQ(NameCache::localHits() - hits, 1u);
  // After a module unload a handle may name another kernel: its text is read again.
  NameCache::forgetHandles();
  EXPECT_EQ(cache.lookupByHandle(&f1, buf, intern), 1) << "f1 now launches kernel_two";
  std::strcpy(buf, "kernel_three");
  EXPECT_EQ(cache.lookupByHandle(nullptr, buf, intern), 2) << "no handle: by text";
  EXPECT_EQ(interned, 3);
  NameCache other;  // another writer's cache never answers with this one's ids
  EXPECT_EQ(other.lookupByHandle(&f2, "kernel_two", [](const char*) { return int64_t{42}; }), 42);
}

TEST(NameCache, TwoCachesNeverShareIds) {
  NameCache one, two;
  std::string name = "kernel";
  EXPECT_EQ(one.lookup(name.c_str(), [](const char*) { return int64_t{7}; }), 7);
  EXPECT_EQ(two.lookup(name.c_str(), [](const char*) { return int64_t{9}; }), 9);
  EXPECT_EQ(one.lookup(name.c_str(), [](const char*) { return int64_t{-1}; }), 7);
}

TEST(NameCache, ThreadsAgreeOnIds) {
  NameCache cache;
  std::vector<std::string> names;
  for (int i = 0; i < 200; ++i) names.push_back("k" + std::to_string(i));
  std::atomic<int64_t> next{0};
  std::vector<std::vector<int64_t>> seen(4, std::vector<int64_t>(names.size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        for (size_t i = 0; i < names.size(); ++i) {
          int64_t id = cache.lookup(names[i].c_str(), [&](const char*) { return next++; });
          if (round > 0) {
            EXPECT_EQ(id, seen[t][i]);
          }
          seen[t][i] = id;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  // Two threads may race to intern the same new text; each keeps a consistent answer, and the
  // shared map settles on one id per text.
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t final_id = cache.lookup(names[i].c_str(), [](const char*) { return int64_t{-1}; });
    EXPECT_GE(final_id, 0);
  }
}

}  // namespace
}  // namespace detrace::tracer
