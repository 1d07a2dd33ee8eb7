// The detrace subcommands. Each registers itself on the CLI11 app and returns the process exit
// code from its run function: 0 success, 1 "divergent" (diff), 2 error.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "detrace/base/status.h"

namespace detrace::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDivergent = 1;
inline constexpr int kExitError = 2;

// Sets up a subcommand; `run` is set to the function main calls if the subcommand was chosen.
using Runner = std::function<int()>;
void addInfoCommand(CLI::App& app, Runner& run);
void addExportCommand(CLI::App& app, Runner& run);
void addSchemaCommand(CLI::App& app, Runner& run);
void addDiffCommand(CLI::App& app, Runner& run);
void addRecordCommand(CLI::App& app, Runner& run);
void addBisectCommand(CLI::App& app, Runner& run);
void addReplayCommand(CLI::App& app, Runner& run);
void addAttachCommand(CLI::App& app, Runner& run);

// The command line as given (main sets it), for checks CLI11 cannot make (e.g. `--` present).
const std::vector<std::string>& rawArgs();

// Prints a command's JSON output (--json) on stdout.
void printJson(const nlohmann::json& j);

// Prints "detrace: error: <message>" to stderr and returns kExitError; under --json, also
// {"error": {"code", "message"}, "exit_status": 2} on stdout unless the command printed its JSON.
int reportError(const Status& status);

namespace detail {
// Parses a whole number written in full (std::stoll's form: leading blanks and a sign allowed, no
// trailing text).
inline bool parseWhole(const std::string& text, long long& v) {
  try {
    size_t used = 0;
    v = std::stoll(text, &used);
    return used == text.size();
  } catch (const std::exception&) {
    return false;
  }
}
}  // namespace detail

// A whole number, 0 or more (an event's sequence number, a rank), with a message a user can read
// (CLI::NonNegativeNumber's names the largest double).
inline CLI::Validator nonNegativeInteger() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        long long v = 0;
        if (detail::parseWhole(text, v) && v >= 0) return {};
        return "must be a whole number, 0 or more (got '" + text + "')";
      },
      "");  // --help shows the option's type name (N) alone
}

// A whole number from lo to hi, one message for every way to miss it (a negative number, text, a
// number out of range); --help shows the type name (N) alone: the option's text says the range.
inline CLI::Validator integerIn(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        long long v = 0;
        if (detail::parseWhole(text, v) && v >= lo && v <= hi) return {};
        return "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) +
               " (got '" + text + "')";
      },
      "");
}

}  // namespace detrace::cli
