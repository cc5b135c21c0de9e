// The Python tools of bigc (`bigc import`: python/bigc_import; `bigc data encode --tokenizer`:
// python/bigc_data), run as children this driver owns:
//
//   - The child runs in its own process group and dies with bigc: SIGINT, SIGTERM, SIGHUP and
//     SIGQUIT to bigc end the whole group (SIGTERM, then SIGKILL after a grace period), and a bigc
//     killed outright takes the child with it (PR_SET_PDEATHSIG).
//   - The tool writes its files into a staging directory beside each output
//     (DIR/.bigc-PID.tmp, named to the tool by $BIGC_STAGING: {"DIR": "STAGING", ...}) and
//     reports them on a pipe ($BIGC_RESULT_FD: one JSON object, {"files": [final paths],
//     "message": "..."} or {"error": "..."}); this driver moves them into place once the child
//     has exited 0 and reported them. So nothing appears after bigc has stopped, and nothing
//     half-written appears at all (a staging directory left by a killed bigc is removed by the
//     next run writing into the same directory).
//   - A time limit bounds the whole run; a tool that never returns is stopped with one message.
//   - An exit or a crash of the code the tool runs (the user's model: sys.exit, os._exit, a
//     signal) is one message naming it; exit 0 only when every file was written.
#pragma once

#include <string>
#include <vector>

namespace bigc {

struct PythonTool {
  std::string command;               // "bigc import", for messages
  std::string module;                // "bigc_import": run as `python -m module args...`
  std::vector<std::string> args;     // the tool's arguments
  std::vector<std::string> outputs;  // the files it will write (their directories get staging)
  double timeout = 0;                // seconds; 0: no limit
  std::string timeoutHint;           // what a timeout message suggests
  std::string userCode = "the tool"; // who may have called sys.exit / os._exit, for messages
  bool help = false;                 // a --help run: prints and writes nothing
};

// The interpreter: $BIGC_PYTHON, else the project's environment <source>/.venv/bin/python. Throws
// UserError naming the fix when there is none.
std::string pythonInterpreter();

// Runs the tool; returns its exit status (0: every file written and moved into place; 1: bad input,
// one message; 2: internal error; 128+N: stopped by signal N). Throws UserError when it cannot start.
int runPythonTool(const PythonTool &tool);

// --timeout S (or --timeout=S) taken out of args: the seconds (>= 0; 0: no limit), or `dflt`.
// Throws UserError naming the option on a bad value.
double takeTimeoutOption(std::vector<std::string> &args, double dflt, const std::string &command);

} // namespace bigc
