// The tracer's dlsym trampoline (tracer/src/dlsym_trampoline.inc) alone: dlsym_trampoline_app,
// with dlsym_trampoline_lib preloaded, checks that dlsym(RTLD_NEXT, ...) from the program still
// searches the objects after the program, that only explicit handles reach detrace_dlsym_handle,
// and that the first lookups of several threads at once find glibc's dlsym (and the stack unwinds
// from there). Natively, and for aarch64, where no machine is at hand, cross-built and run under
// qemu-user where aarch64-linux-gnu-g++ and qemu-aarch64-static are installed (scripts/setup).
#include <filesystem>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../db/test_util.h"
#include "common/shell.h"

namespace detrace {
namespace {

using testing::TempDir;
using Output = testing::ShellOutput;

// The program's verdict: it prints "dlsym_trampoline_app: ok" and exits 0 only when every check
// passed (each failed one is printed).
void expectOk(const Output& o) {
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_NE(o.out.find("dlsym_trampoline_app: ok"), std::string::npos) << o.out;
}

bool onPath(const std::string& tool) {
  return testing::runShell("command -v " + tool + " >/dev/null").status == 0;
}

// Where the cross compiler finds `file` (an absolute path), or "" where it does not.
std::string crossFile(const std::string& cxx, const std::string& file) {
  Output o = testing::runShell(cxx + " -print-file-name=" + file, false);
  while (!o.out.empty() && (o.out.back() == '\n' || o.out.back() == ' ')) o.out.pop_back();
  std::error_code ec;
  if (o.status != 0 || !std::filesystem::path(o.out).is_absolute() ||
      !std::filesystem::exists(o.out, ec))
    return "";
  return std::filesystem::canonical(o.out, ec).string();
}

TEST(DlsymTrampoline, KeepsTheCallerForRtldNextNatively) {
#ifndef DETRACE_TEST_DLSYM_TRAMPOLINE
  GTEST_SKIP() << "no dlsym trampoline on this architecture (x86-64 and aarch64 only)";
#else
  std::string dir = std::string(DETRACE_BINARY_DIR) + "/tests";
  expectOk(testing::runShell(fmt::format(
      "LD_PRELOAD={0}/libdlsym_trampoline.so {0}/dlsym_trampoline_app libm.so.6", dir)));
#endif
}

// The aarch64 trampoline, cross-built and run under qemu-user with the cross toolchain's libraries.
// Then once more branch-protected: the library marked BTI, which qemu enforces, so the program's
// call through its PLT (`br x17`) must land on the trampoline's `bti c`.
TEST(DlsymTrampoline, KeepsTheCallerForRtldNextOnAarch64UnderQemu) {
#if defined(__aarch64__)
  GTEST_SKIP() << "this is aarch64: KeepsTheCallerForRtldNextNatively checks its trampoline";
#endif
  const std::string cxx = "aarch64-linux-gnu-g++";
  const std::string qemu = "qemu-aarch64-static";
  if (!onPath(cxx)) GTEST_SKIP() << cxx << " not found (apt-get install g++-aarch64-linux-gnu)";
  if (!onPath(qemu)) GTEST_SKIP() << qemu << " not found (apt-get install qemu-user-static)";
  // The cross C library: its loader's directory's parent is the root qemu finds libraries under.
  std::string loader = crossFile(cxx, "ld-linux-aarch64.so.1");
  if (loader.empty() || crossFile(cxx, "libc.so").empty()) {
    GTEST_SKIP() << "the aarch64 C library for " << cxx
                 << " not found (apt-get install libc6-dev-arm64-cross)";
  }
  std::string root = std::filesystem::path(loader).parent_path().parent_path().string();

  TempDir tmp;
  std::string src = std::string(DETRACE_SOURCE_DIR);
  std::string flags =
      fmt::format("-std=c++20 -O2 -Wall -Wextra -Wpedantic -Werror -I{}/tracer/src", src);
  std::string lib = tmp.file("libdlsym_trampoline.so");
  std::string app = tmp.file("dlsym_trampoline_app");
  Output o = testing::runShell(
      fmt::format("{} {} -fPIC -shared {}/tests/tracer/dlsym_trampoline_lib.cc -o {} -ldl -pthread",
                  cxx, flags, src, lib));
  ASSERT_EQ(o.status, 0) << o.out;
  o = testing::runShell(fmt::format(
      "{} {} {}/tests/tracer/dlsym_trampoline_app.cc -o {} -ldl -pthread", cxx, flags, src, app));
  ASSERT_EQ(o.status, 0) << o.out;
  expectOk(testing::runShell(
      fmt::format("{} -L {} -E LD_PRELOAD={} {} libm.so.6", qemu, root, lib, app)));

  // Branch-protected. One input without the BTI mark leaves the library unmarked (and unchecked):
  // the toolchain's crt files and libgcc's outline atomics have none, and this library needs
  // neither (no static constructors, inline atomics).
  std::string bti_lib = tmp.file("bti/libdlsym_trampoline.so");
  std::filesystem::create_directories(tmp.file("bti"));
  o = testing::runShell(fmt::format(
      "{} {} -mbranch-protection=standard -mno-outline-atomics -nostartfiles -fPIC -shared "
      "{}/tests/tracer/dlsym_trampoline_lib.cc -o {} -ldl -pthread",
      cxx, flags, src, bti_lib));
  ASSERT_EQ(o.status, 0) << o.out;
  o = testing::runShell("aarch64-linux-gnu-readelf -n " + bti_lib);
  ASSERT_NE(o.out.find("BTI"), std::string::npos) << "the library is not marked BTI:\n" << o.out;
  expectOk(testing::runShell(
      fmt::format("{} -cpu max -L {} -E LD_PRELOAD={} {} libm.so.6", qemu, root, bti_lib, app)));
}

}  // namespace
}  // namespace detrace
