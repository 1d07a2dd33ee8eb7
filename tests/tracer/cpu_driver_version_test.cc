// The driver's version as /proc/driver/nvidia/version gives it. Where this reads nothing the
// tracer loads NVML into the traced process to ask (nvml_query.h), which costs seconds and leaves
// NVML's own threads and descriptors in a program that may not use CUDA at all: both kernel
// modules' texts must be read. The texts below have the shape of the H100 machine's (open module,
// driver 580.159.04) and of the proprietary module's; the numbers are drawn fresh.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "detrace/tracer/driver_version.h"

namespace detrace::tracer {
namespace {

std::string randomVersion(std::mt19937& rng) {
  std::uniform_int_distribution<int> major(400, 999), minor(0, 199), patch(0, 99);
  return fmt::format("{}.{}.{:02d}", major(rng), minor(rng), patch(rng));
}

TEST(DriverVersion, BothKernelModulesTextsAreRead) {
  std::random_device rd;
  const unsigned seed = rd();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const std::string open = randomVersion(rng), proprietary = randomVersion(rng);
  const std::string gcc = "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n";
  EXPECT_EQ(driverVersionFromProc(fmt::format(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {}  Release Build  "
                "(dvs-builder@U16-I3-B03-4-3)  Tue Oct 14 10:36:14 UTC 2025\n{}",
                open, gcc)),
            open);
  EXPECT_EQ(driverVersionFromProc(fmt::format(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {}  Sat Aug 19 01:13:15 UTC 2023\n{}",
                proprietary, gcc)),
            proprietary);
}

TEST(DriverVersion, TextsWithoutOneGiveNothing) {
  EXPECT_EQ(driverVersionFromProc(""), "");
  EXPECT_EQ(driverVersionFromProc("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64\n"
                                  "GCC version:  gcc version 12.3.0\n"),
            "");
  EXPECT_EQ(driverVersionFromProc("some other file\n"), "");
  EXPECT_EQ(driverVersionFromProc("NVRM version: Kernel Module 580. Release\n"), "");
}

// Where a container hides /proc/driver, the kernel module's own sysfs entry gives the version
// alone on its line: read it (and only a version), before NVML would be loaded.
TEST(DriverVersion, SysfsGivesTheVersionWhereProcIsHidden) {
  std::random_device rd;
  const unsigned seed = rd();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  const std::string v = randomVersion(rng), other = randomVersion(rng);
  EXPECT_EQ(driverVersionFromSysfs(v + "\n"), v);
  EXPECT_EQ(driverVersionFromSysfs(v), v);
  EXPECT_EQ(driverVersionFromSysfs(""), "");
  EXPECT_EQ(driverVersionFromSysfs("\n"), "");
  EXPECT_EQ(driverVersionFromSysfs("580\n"), "");
  EXPECT_EQ(driverVersionFromSysfs("580.95 beta\n"), "");

  char dir_template[] = "/tmp/detrace-driver-version-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, proc = dir + "/proc-version", sysfs = dir + "/sys-version";
  auto put = [](const std::string& path, const std::string& text) { std::ofstream(path) << text; };
  EXPECT_EQ(driverVersionFromFiles(proc, sysfs), "") << "neither file exists";
  put(sysfs, v + "\n");
  EXPECT_EQ(driverVersionFromFiles(proc, sysfs), v) << "/proc hidden: sysfs tells";
  put(proc, fmt::format("NVRM version: NVIDIA UNIX x86_64 Kernel Module  {}  Sat Aug 19 2023\n", other));
  EXPECT_EQ(driverVersionFromFiles(proc, sysfs), other) << "/proc comes first";
  put(proc, "not the driver's text\n");
  EXPECT_EQ(driverVersionFromFiles(proc, sysfs), v) << "/proc without a version: sysfs tells";
  put(sysfs, "garbage\n");
  EXPECT_EQ(driverVersionFromFiles(proc, sysfs), "");
  std::remove(proc.c_str());
  std::remove(sysfs.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace detrace::tracer
