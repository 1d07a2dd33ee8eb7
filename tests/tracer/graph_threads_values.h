// Shapes and values shared by `tracer_gpu_app graph-threads` (graph_gpu_app.cuh) and the test that
// checks its recording on the CPU (gpu_graph_test.cc). Plain C++, callable from device code too.
#pragma once

#ifdef __CUDACC__
#define GRAPH_APP_HD __host__ __device__
#else
#define GRAPH_APP_HD
#endif

namespace graph_app {

// D1 (kM x kN) = A (kM x kK) X (kK x kN); Y (kM2 x kN) = W (kM2 x kM) D1; fp32, column major.
constexpr int kM = 256, kK = 128, kN = 64, kM2 = 192;

// graph-threads: each of kThreads threads launches the graph kThreadLaunches times at once.
constexpr int kThreads = 2, kThreadLaunches = 100;
// Unserialized: thread 0's first kStaggerLaunches launches (synchronized) come before thread 1's
// first, so results are given before the threads' calls can first overlap.
constexpr int kStaggerLaunches = 16;
// Switching: recording stopped and started this many times while the threads launch.
constexpr int kSwitches = 3;
static_assert(kThreads * kThreadLaunches < 343, "threadsX spells k < 343 only");

// X at the graph's k-th execution (k < 343): its first three values spell k in base 7, every value
// is an integer in [-3, 3]. With A and W in [-3, 3] too, D1 and Y are exact in fp32 whatever the
// order of the sums (|Y| <= 256 * 3 * 128 * 9 < 2^24).
GRAPH_APP_HD inline float threadsX(int i, int k) {
  int digit = 0;
  if (i == 0) digit = k % 7;
  else if (i == 1) digit = (k / 7) % 7;
  else if (i == 2) digit = (k / 49) % 7;
  else digit = (i * 3 + k) % 7;
  return static_cast<float>(digit - 3);
}

// A and W in graph-threads: integers in [-3, 3].
GRAPH_APP_HD inline float threadsA(int i) { return static_cast<float>((i * 5 + 1) % 7 - 3); }
GRAPH_APP_HD inline float threadsW(int i) { return static_cast<float>((i * 3 + 2) % 7 - 3); }

}  // namespace graph_app
