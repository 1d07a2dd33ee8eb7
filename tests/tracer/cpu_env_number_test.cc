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
  EXPECT_EQ(parseEnvNumber("X", "3", 5, 4, 10).value, 4) << "positive, below the range";
  EXPECT_EQ(parseEnvNumber("X", "0", 5, 0, 10).value, 0) << "0 where the range has it";
  EXPECT_EQ(parseEnvNumber("X", "-3", 5, 0, 10).value, 0) << "below a range from 0";
}

// 0 or less where the range is positive is the default, as an unset setting (a 0 exit timeout
// would cut every trace short; was so before this rule too).
TEST(EnvNumber, ZeroOrLessForAPositiveSettingIsTheDefault) {
  for (const char* v : {"0", "-1", "-99999999999999999999999", " -99999999999999999999999"}) {
    const EnvNumber n = parseEnvNumber("DETRACE_EXIT_TIMEOUT_S", v, 60, 1, 604800);
    EXPECT_EQ(n.value, 60) << v;
    EXPECT_EQ(n.problem, std::string("DETRACE_EXIT_TIMEOUT_S=") + v + " is not a positive number (1 to 604800); using 60");
  }
}

}  // namespace
}  // namespace detrace::tracer
