// detrace: record-and-replay debugger for bitwise reproducibility of GPU inference.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "detrace/base/version.h"

namespace detrace::cli {

namespace {
std::vector<std::string> g_raw_args;
bool g_json_printed = false;

// Whether the command line asks for JSON: --json before any `--` (after it, the recorded
// command's own arguments).
bool jsonWanted() {
  for (const std::string& a : g_raw_args) {
    if (a == "--") return false;
    if (a == "--json") return true;
  }
  return false;
}
}  // namespace

const std::vector<std::string>& rawArgs() { return g_raw_args; }

void printJson(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  g_json_printed = true;
}

int reportError(const Status& status) {
  std::fprintf(stderr, "detrace: error: %s\n", status.message().c_str());
  // A script that asked for JSON reads an object on stdout, not nothing, when the command fails.
  if (jsonWanted() && !g_json_printed) {
    printJson({{"error", {{"code", errorCodeName(status.code())}, {"message", status.message()}}},
               {"exit_status", kExitError}});
  }
  return kExitError;
}

namespace {

// An option given before the command (`detrace --json info RUN`): commands take their options
// after their name; the corrected command line is shown where a command follows.
std::string topLevelOptionText(const CLI::App& app, int argc, char** argv, const std::string& name) {
  for (int s = 1; s < argc; ++s) {
    const std::string word = argv[s];
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() != word) continue;
      if (sub->get_option_no_throw(name) == nullptr) {
        return fmt::format("unknown option {} for detrace {}", name, word);
      }
      std::string fixed = "detrace " + word;
      for (int k = 1; k < s; ++k) fixed += std::string(" ") + argv[k];
      for (int k = s + 1; k < argc; ++k) fixed += std::string(" ") + argv[k];
      return fmt::format("{} goes after the command's name: {}", name, fixed);
    }
  }
  return fmt::format("unknown option {} (options follow a command: detrace COMMAND [OPTIONS])", name);
}

// What CLI11's "arguments were not expected" means, in words: the first word before `--` that
// looks like a flag the command does not have ("unknown option --bogus"), or, for a command that
// runs a program, that program's words given without `--` before them. CLI11 lists every word it
// did not take, the `--` after an unknown flag included ("-- --bogus"), which reads as if `--`
// were the mistake. "" where neither is certain (CLI11's own text is shown then).
std::string extrasText(const CLI::App& app, int argc, char** argv) {
  const CLI::App* cmd = &app;
  int first = 1;
  if (argc > 1 && argv[1][0] != '-') {
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == argv[1]) cmd = sub;
    }
    first = 2;
  }
  const bool runs_a_program = cmd->get_name() == "record" || cmd->get_name() == "bisect";
  bool separator = false;
  for (int i = first; i < argc; ++i) separator = separator || std::string(argv[i]) == "--";
  int loose = -1;  // the first word no option took
  for (int i = first; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") break;
    if (word.size() < 2 || word[0] != '-' || std::isdigit(static_cast<unsigned char>(word[1])) != 0) {
      if (loose < 0) loose = i;
      continue;
    }
    std::string name = word.substr(0, word.find('='));
    const CLI::Option* opt = cmd->get_option_no_throw(name);
    if (opt == nullptr && name[1] != '-' && name.size() > 2) {
      opt = cmd->get_option_no_throw(name.substr(0, 2));  // -orun: -o with its value attached
      if (opt == nullptr || opt->get_type_size_min() == 0) return "";
      continue;
    }
    if (name == "-h" || name == "--help") continue;
    if (opt == nullptr) {
      if (runs_a_program && !separator && loose >= 0) {
        std::string fixed = "detrace";
        for (int k = 1; k < argc; ++k) fixed += std::string(k == loose ? " -- " : " ") + argv[k];
        return fmt::format("put the command to run after --: {}", fixed);
      }
      if (cmd == &app) return topLevelOptionText(app, argc, argv, name);
      return fmt::format("unknown option {} for detrace {}", name, cmd->get_name());
    }
    // The option's value, as the next word (not --name=value): not a flag, whatever it starts with.
    if (word.find('=') == std::string::npos && opt->get_type_size_min() > 0 && i + 1 < argc &&
        std::string(argv[i + 1]) != "--") {
      ++i;
    }
  }
  return "";
}

// One sentence for a command line CLI11 refused, with the help to read: a misspelled command is
// named as such (CLI11 says only that a subcommand is required).
std::string parseErrorText(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known |= sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) return fmt::format("no command '{}'; the commands are {} (see detrace --help)", argv[1], names);
  }
  const std::string sub = argc > 1 && argv[1][0] != '-' ? std::string(argv[1]) + " " : "";
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    if (std::string text = extrasText(app, argc, argv); !text.empty()) {
      return fmt::format("{} (see detrace {}--help)", text, sub);
    }
  }
  return fmt::format("{} (see detrace {}--help)", e.what(), sub);
}

// What the command printed must have reached its destination: `detrace info RUN > /dev/full`, or
// a closed stdout, is an error a script has to see, not a success with nothing written.
int outputWritten(int rc) {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return rc;
  const int e = errno;
  std::fprintf(stderr, "detrace: error: writing the output failed: %s\n",
               e != 0 ? std::strerror(e) : "write error");
  return kExitError;
}

// `detrace --help` lists each command by its first sentence: a command whose description runs to a
// paragraph (record, bisect, attach) would otherwise take a screen of the list; its own --help
// shows the whole text.
class CommandListFormatter : public CLI::Formatter {
 public:
  std::string make_subcommand(const CLI::App* sub) const override {
    std::string text = sub->get_description();
    if (text.size() > 100 || text.find('\n') != std::string::npos) {
      std::replace(text.begin(), text.end(), '\n', ' ');
      size_t cut = std::min(text.find(": "), text.find(". "));
      if (cut != std::string::npos) text = text.substr(0, cut) + fmt::format(" (detrace {} --help)", sub->get_name());
    }
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true), text, column_width_);
    return out.str();
  }
};

}  // namespace

}  // namespace detrace::cli

int main(int argc, char** argv) {
  using namespace detrace::cli;
  CLI::App app{
      "detrace: find where two runs of a GPU inference engine stop being bit-identical.\n\n"
      "A run is a directory made by `detrace record` (one .dtrace SQLite file per rank plus\n"
      "manifest.json); every command that reads runs accepts such a directory or one .dtrace file.\n\n"
      "Examples:\n"
      "  detrace record -o runA -- ./app         record a program (no code change)\n"
      "  detrace attach runA start|stop|status   switch recording in a running (--paused) program\n"
      "  detrace diff runA runB                  where and why two runs part\n"
      "  detrace replay runA --event 41          re-execute an op with deterministic alternatives\n"
      "  detrace bisect -- python app.py         record, diff, capture, replay: a verdict\n"
      "  detrace info runA                       summarise a run\n"
      "  detrace info runA --json                the same, for scripts\n"
      "  detrace export runA -o runA.json        open runA.json in ui.perfetto.dev\n"
      "  detrace schema                          the trace format, table by table\n",
      "detrace"};
  app.formatter(std::make_shared<CommandListFormatter>());  // before the commands: they inherit it
  app.set_version_flag("--version", std::string("detrace ") + detrace::kToolVersion);
  app.require_subcommand(1);
  app.fallthrough(false);
  Runner run;
  addDiffCommand(app, run);
  addInfoCommand(app, run);
  addExportCommand(app, run);
  addSchemaCommand(app, run);
  addRecordCommand(app, run);
  addReplayCommand(app, run);
  addBisectCommand(app, run);
  addAttachCommand(app, run);
  g_raw_args.assign(argv, argv + argc);
  int rc = kExitError;
  try {
    app.parse(argc, argv);
    rc = run ? run() : kExitError;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version
      rc = app.exit(e) == 0 ? kExitOk : kExitError;
    } else {
      rc = reportError(detrace::Status(detrace::ErrorCode::kInvalidArgument, parseErrorText(app, e, argc, argv)));
    }
  } catch (const std::bad_alloc&) {
    rc = reportError(detrace::Status(detrace::ErrorCode::kIo, "out of memory"));
  } catch (const std::exception& e) {  // a bug in detrace: said as an error, never an abort
    rc = reportError(detrace::Status(detrace::ErrorCode::kInternal,
                                     std::string("unexpected error (a bug in detrace; please report it): ") + e.what()));
  }
  return outputWritten(rc);
}
