// Python tools run as children bigc owns: include/bigc/Driver/PythonTool.h.
#include "bigc/Driver/PythonTool.h"

#include "bigc/Support/error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <set>
#include <string>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#ifndef BIGC_SOURCE_DIR
#define BIGC_SOURCE_DIR "."
#endif

namespace bigc {

namespace {

constexpr double kGraceSeconds = 3.0; // SIGTERM, then SIGKILL

bool executable(const std::string &p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

std::string dirOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string absolute(const std::string &dir) {
  char *real = ::realpath(dir.c_str(), nullptr);
  if (!real) return "";
  std::string out = real;
  std::free(real);
  return out;
}

void removeTree(const std::string &path) {
  if (DIR *d = ::opendir(path.c_str())) {
    while (dirent *e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      ::unlink((path + "/" + n).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(path.c_str());
}

// Staging directories of runs whose bigc is gone (killed outright): removed.
void removeStaleStaging(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (dirent *e = ::readdir(d)) {
    std::string n = e->d_name;
    const std::string pre = ".bigc-", post = ".tmp";
    if (n.size() <= pre.size() + post.size() || n.compare(0, pre.size(), pre) != 0 ||
        n.compare(n.size() - post.size(), post.size(), post) != 0)
      continue;
    const std::string num = n.substr(pre.size(), n.size() - pre.size() - post.size());
    if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::strtol(num.c_str(), nullptr, 10);
    if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) stale.push_back(dir + "/" + n);
  }
  ::closedir(d);
  for (const auto &s : stale) removeTree(s);
}

volatile sig_atomic_t gSignal = 0;
extern "C" void onToolSignal(int sig) { gSignal = sig; }

const char *signalName(int sig) {
  switch (sig) {
  case SIGINT: return "SIGINT";
  case SIGTERM: return "SIGTERM";
  case SIGHUP: return "SIGHUP";
  case SIGQUIT: return "SIGQUIT";
  case SIGKILL: return "SIGKILL";
  case SIGSEGV: return "SIGSEGV";
  case SIGABRT: return "SIGABRT";
  case SIGBUS: return "SIGBUS";
  case SIGFPE: return "SIGFPE";
  case SIGILL: return "SIGILL";
  default: return nullptr;
  }
}

std::string describeSignal(int sig) {
  const char *n = signalName(sig);
  return std::to_string(sig) + (n ? std::string(" (") + n + ")" : std::string());
}

// Ends the child's whole process group: SIGTERM, then SIGKILL after the grace period; reaps it.
void endGroup(pid_t pid) {
  ::kill(-pid, SIGTERM);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > kGraceSeconds) {
      ::kill(-pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid, SIGKILL); // anything the child left in its group
}

} // namespace

std::string pythonInterpreter() {
  if (const char *env = std::getenv("BIGC_PYTHON"); env && *env) {
    if (!executable(env))
      throw UserError(std::string("BIGC_PYTHON=") + env + " is not an executable Python interpreter");
    return env;
  }
  const std::string python = std::string(BIGC_SOURCE_DIR) + "/.venv/bin/python";
  if (!executable(python))
    throw UserError("PyTorch (2.15), transformers and tokenizers are needed, in a Python environment, and there is "
                    "none at " +
                    std::string(BIGC_SOURCE_DIR) +
                    "/.venv: run scripts/setup-python.sh (about 2 minutes, from PyPI), or set BIGC_PYTHON to an "
                    "interpreter that has them");
  return python;
}

double takeTimeoutOption(std::vector<std::string> &args, double dflt, const std::string &command) {
  double timeout = dflt;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    std::string value;
    if (a == "--timeout") {
      if (i + 1 >= args.size()) throw UserError(command + ": option --timeout needs a number of seconds (0: no limit)");
      value = args[++i];
    } else if (a.rfind("--timeout=", 0) == 0) {
      value = a.substr(10);
    } else {
      rest.push_back(a);
      continue;
    }
    char *end = nullptr;
    errno = 0;
    timeout = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || errno != 0 || !(timeout >= 0) || timeout > 1e9)
      throw UserError(command + ": option --timeout: expected a number of seconds >= 0 (0: no limit), got '" + value +
                      "'");
  }
  args = rest;
  return timeout;
}

int runPythonTool(const PythonTool &tool) {
  const std::string python = pythonInterpreter();
  // A staging directory in each output's directory (the same filesystem: the final move is a
  // rename). A missing directory is left to the tool, which names it.
  std::map<std::string, std::string> staging; // absolute output directory -> staging directory
  auto removeStaging = [&] {
    for (const auto &[dir, st] : staging) removeTree(st);
  };
  if (!tool.help)
    for (const std::string &out : tool.outputs) {
      const std::string dir = absolute(dirOf(out));
      struct stat st {};
      if (dir.empty() || staging.count(dir) || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
      removeStaleStaging(dir);
      const std::string s = dir + "/.bigc-" + std::to_string(::getpid()) + ".tmp";
      removeTree(s);
      if (::mkdir(s.c_str(), 0777) != 0) {
        const int e = errno;
        removeStaging();
        throw UserError(tool.command + ": " + out + ": cannot write into " + dir + ": " + std::strerror(e));
      }
      staging[dir] = s;
    }
  nlohmann::json stagingJson = nlohmann::json::object();
  for (const auto &[dir, s] : staging) stagingJson[dir] = s;

  std::string pythonPath = std::string(BIGC_SOURCE_DIR) + "/python";
  if (const char *pp = std::getenv("PYTHONPATH"); pp && *pp) pythonPath += std::string(":") + pp;
  std::vector<std::string> argv = {python, "-m", tool.module};
  argv.insert(argv.end(), tool.args.begin(), tool.args.end());

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    removeStaging();
    throw UserError(tool.command + ": cannot create a pipe: " + std::strerror(errno));
  }
  // The signals that end bigc end the tool: caught from before the fork, so none is missed.
  struct sigaction sa {
  }, old[4];
  const int sigs[4] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
  sa.sa_handler = onToolSignal;
  sigemptyset(&sa.sa_mask);
  gSignal = 0;
  for (int k = 0; k < 4; ++k) sigaction(sigs[k], &sa, &old[k]);
  auto restoreSignals = [&] {
    for (int k = 0; k < 4; ++k) sigaction(sigs[k], &old[k], nullptr);
  };
  const pid_t parent = ::getpid();
  const std::string stagingText = stagingJson.dump();
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    restoreSignals();
    ::close(fds[0]), ::close(fds[1]);
    removeStaging();
    throw UserError(tool.command + ": cannot start " + python + ": " + std::strerror(errno));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) std::_Exit(1); // bigc is already gone
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int s : sigs) sigaction(s, &dfl, nullptr);
    ::setenv("PYTHONPATH", pythonPath.c_str(), 1);
    const int w = ::dup(fds[1]); // the result pipe, kept open across exec
    ::setenv("BIGC_RESULT_FD", std::to_string(w).c_str(), 1);
    ::setenv("BIGC_STAGING", stagingText.c_str(), 1);
    std::vector<char *> cargs;
    for (auto &a : argv) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    ::execv(python.c_str(), cargs.data());
    std::fprintf(stderr, "%s: cannot run %s: %s\n", tool.command.c_str(), python.c_str(), std::strerror(errno));
    std::_Exit(2);
  }
  ::setpgid(pid, pid); // (the child does it too: whichever runs first)
  ::close(fds[1]);
  const int rfd = fds[0];
  ::fcntl(rfd, F_SETFL, O_NONBLOCK);
  std::string result;
  auto drain = [&] {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(rfd, buf, sizeof buf);
      if (n > 0) {
        result.append(buf, size_t(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break; // EAGAIN or EOF
    }
  };
  auto cleanup = [&] {
    ::close(rfd);
    removeStaging();
    restoreSignals();
  };
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    drain();
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      const int e = errno;
      cleanup();
      throw UserError(tool.command + ": lost its Python process: " + std::strerror(e));
    }
    if (gSignal) {
      const int sig = gSignal;
      endGroup(pid);
      cleanup();
      std::fprintf(stderr, "%s: stopped by %s; its Python process was ended; nothing written\n", tool.command.c_str(),
                   signalName(sig) ? signalName(sig) : std::to_string(sig).c_str());
      return 128 + sig;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tool.timeout > 0 && waited > tool.timeout) {
      endGroup(pid);
      cleanup();
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", tool.timeout);
      std::fprintf(stderr, "%s: did not finish within %s s (--timeout %s): stopped it, nothing written. %s\n",
                   tool.command.c_str(), secs, secs, tool.timeoutHint.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  drain();
  ::kill(-pid, SIGKILL); // whatever the tool left running in its group

  nlohmann::json res;
  try {
    if (!result.empty()) res = nlohmann::json::parse(result);
  } catch (const nlohmann::json::exception &) {
    res = nlohmann::json();
  }
  const bool reported = res.is_object() && (res.contains("files") || res.contains("error"));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    cleanup();
    std::fprintf(stderr, "%s: its Python process (%s) was killed by signal %s while running %s; nothing written\n",
                 tool.command.c_str(), python.c_str(), describeSignal(sig).c_str(), tool.userCode.c_str());
    return sig == SIGKILL ? 1 : 2;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 2;
  if (reported && res.contains("error")) { // the tool said what went wrong
    cleanup();
    return code == 0 ? 1 : code;
  }
  if (!reported) {
    cleanup();
    if (tool.help) return code; // --help printed (or its error)
    std::fprintf(stderr,
                 "%s: its Python process ended with exit status %d before writing anything: %s called %s? Nothing "
                 "written\n",
                 tool.command.c_str(), code, tool.userCode.c_str(),
                 code == 0 ? "sys.exit(0) or os._exit(0)" : ("os._exit(" + std::to_string(code) + ")").c_str());
    return 1;
  }
  // The files, written in staging: moved into place in the order reported.
  std::vector<std::pair<std::string, std::string>> moves; // staged -> final
  // (some of the outputs: bigc import hf writes no weights for a config alone)
  bool ok = code == 0 && res["files"].is_array() && !res["files"].empty() && res["files"].size() <= tool.outputs.size();
  if (ok)
    for (const auto &f : res["files"]) {
      if (!f.is_string()) {
        ok = false;
        break;
      }
      const std::string final = f.get<std::string>();
      const size_t slash = final.find_last_of('/');
      auto st = slash == std::string::npos ? staging.end() : staging.find(final.substr(0, slash));
      if (st == staging.end() || slash + 1 >= final.size()) {
        ok = false;
        break;
      }
      moves.push_back({st->second + final.substr(slash), final});
    }
  if (!ok) {
    cleanup();
    std::fprintf(stderr, "%s: internal error: its Python process reported %s (exit status %d); nothing written\n",
                 tool.command.c_str(), result.c_str(), code);
    return 2;
  }
  for (const auto &[from, to] : moves)
    if (::rename(from.c_str(), to.c_str()) != 0) {
      const int e = errno;
      cleanup();
      std::fprintf(stderr, "%s: cannot move %s into place: %s\n", tool.command.c_str(), to.c_str(), std::strerror(e));
      return 1;
    }
  std::set<std::string> dirs;
  for (const auto &[from, to] : moves) dirs.insert(dirOf(to));
  for (const auto &d : dirs)
    if (int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY); fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  cleanup();
  if (res.contains("message") && res["message"].is_string())
    std::printf("%s\n", res["message"].get<std::string>().c_str());
  return 0;
}

} // namespace bigc
