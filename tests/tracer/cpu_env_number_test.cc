// parseEnvNumber (env_number.h): whole-number settings from the recorded program's environment.
#include <gtest/gtest.h>

#include "detrace/tracer/env_number.h"

namespace detrace::tracer {
namespace {

TEST(EnvNumber, ValuesInRangeAreTakenAndUnsetGivesTheDefault) {
  EXPECT_EQ(parseEnvNumber("X", "250", 500, 1, 60000).value, 250);
  EXPECT_TRUE(parseEnvNumber("X", "250", 500, 1, 60000).problem.empty());
  EXPECT_EQ(parseEnvNumber("X", nullptr, 500, 1, 60000).value, 500);
  EXPECT_EQ(parseEnvNumber("X", "", 500, 1, 60000).value, 500);
  EXPECT_TRUE(parseEnvNumber("X", "", 500, 1, 60000).problem.empty());
  EXPECT_EQ(parseEnvNumber("X", "1", 500, 1, 60000).value, 1);
  EXPECT_EQ(parseEnvNumber("X", "60000", 500, 1, 60000).value, 60000);
}

TEST(EnvNumber, WhatIsNotAWholeNumberIsNamedAndGivesTheDefault) {
  for (const char* bad : {"abc", "5junk", "1e3", "NaN", " 7x", "2.5", "-"}) {
    const EnvNumber n = parseEnvNumber("DETRACE_RECORDS_HOLD_MS", bad, 500, 1, 60000);
    EXPECT_EQ(n.value, 500) << bad;
    EXPECT_EQ(n.problem, std::string("DETRACE_RECORDS_HOLD_MS=") + bad + " is not a whole number (1 to 60000); using 500");
  }
}

// Out of range, overflowing 64 bits included (was: taken, then multiplied into nanoseconds past
// 2^63): the nearest bound, named.
TEST(EnvNumber, OutOfRangeIsBroughtToTheNearestBoundAndNamed) {
  const EnvNumber huge = parseEnvNumber("DETRACE_REORDER_TIMEOUT_MS", "9223372036854775807", 5000, 1, 3600000);
  EXPECT_EQ(huge.value, 3600000);
  EXPECT_EQ(huge.problem, "DETRACE_REORDER_TIMEOUT_MS=9223372036854775807 is outside 1 to 3600000; using 3600000");
  EXPECT_EQ(parseEnvNumber("X", "99999999999999999999999", 5, 1, 10).value, 10) << "past 64 bits";
  EXPECT_EQ(parseEnvNumber("X", "-99999999999999999999999", 5, 1, 10).value, 1) << "below -2^63";
  EXPECT_EQ(parseEnvNumber("X", "-1", 5, 1, 10).value, 1);
  EXPECT_EQ(parseEnvNumber("X", "0", 5, 1, 10).value, 1);
  EXPECT_FALSE(parseEnvNumber("X", "0", 5, 1, 10).problem.empty());
  EXPECT_EQ(parseEnvNumber("X", "0", 5, 0, 10).value, 0) << "0 where the range has it";
}

}  // namespace
}  // namespace detrace::tracer
