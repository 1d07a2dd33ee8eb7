// detrace schema [--sql]
#include <cstdio>
#include <memory>

#include "commands.h"
#include "detrace/db/schema.h"

namespace detrace::cli {

void addSchemaCommand(CLI::App& app, Runner& run) {
  auto sql = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "schema", "Print the trace format (every table and column, with its meaning) as Markdown.");
  cmd->add_flag("--sql", *sql, "Print the CREATE statements instead");
  cmd->footer("Traces are SQLite files: query them with sqlite3, e.g.\n"
              "  sqlite3 runA/proc-123.dtrace 'SELECT name, count(*) FROM kernel_launches GROUP BY 1'\n");
  cmd->callback([sql, &run] {
    run = [sql] {
      std::string text = *sql ? db::schemaDdl() : db::schemaMarkdown();
      std::fputs(text.c_str(), stdout);
      return kExitOk;
    };
  });
}

}  // namespace detrace::cli
