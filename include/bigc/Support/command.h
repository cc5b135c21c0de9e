// Running one command of a bigc tool (`bigc <command>`, `bigc-run <command>`): a UserError becomes
// "bigc <command>: message" on stderr and exit status 1, anything else an internal error (exit
// status 2); never a crash (the README's "Errors"). Header-only; no MLIR here.
#pragma once

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "bigc/Support/error.h"

namespace bigc::cli {

// "bigc <label>: message", unless the message already names the command.
inline void reportError(const std::string &label, const std::string &msg) {
  std::string first = label.substr(0, label.find(' '));
  if (msg.rfind(label + ":", 0) == 0 || msg.rfind(first + " ", 0) == 0 || msg.rfind(first + ":", 0) == 0)
    std::fprintf(stderr, "bigc %s\n", msg.c_str());
  else
    std::fprintf(stderr, "bigc %s: %s\n", label.c_str(), msg.c_str());
}

// body() returns the exit status; what it throws is reported under `label`.
template <class Body> int runCommand(const std::string &label, Body &&body) {
  try {
    return body();
  } catch (const UserError &e) {
    reportError(label, e.what());
    return 1;
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr, "bigc %s: internal error: out of memory\n", label.c_str());
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "bigc %s: internal error: %s (please report it)\n", label.c_str(), e.what());
    return 2;
  } catch (...) {
    std::fprintf(stderr, "bigc %s: internal error: unknown exception (please report it)\n", label.c_str());
    return 2;
  }
}

} // namespace bigc::cli
