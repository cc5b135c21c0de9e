// Command-line parsing shared by every bigc tool (the README documents the commands).
// `--flag=value` and `--flag value` both work; sizes take K M G T suffixes (powers of 1024) and
// may be fractional. Errors are UserError (exit status 1) naming the option and what to do.
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "bigc/Support/error.h"

namespace bigc::cli {

using bigc::UserError;

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values; // "--name" -> value ("" for a bare switch)

  bool has(const std::string &name) const { return values.count(name) != 0; }
  std::string str(const std::string &name, const std::string &dflt = "") const {
    auto it = values.find(name);
    return it == values.end() ? dflt : it->second;
  }
  int64_t integer(const std::string &name, int64_t dflt) const;
  double number(const std::string &name, double dflt) const;
  int64_t size(const std::string &name, int64_t dflt) const; // bytes, with K M G T suffixes
};

// `valued`: options that take a value; `switches`: options that take none. Anything else that
// starts with "--" is an unknown flag: UserError naming it (and a close match when there is one).
Args parse(int argc, char **argv, int first, const std::set<std::string> &valued, const std::set<std::string> &switches,
           const std::string &command);

int64_t parseSize(const std::string &text, const std::string &what);
int64_t parseInt(const std::string &text, const std::string &what);
double parseDouble(const std::string &text, const std::string &what);

// ----- implementation (small; header-only so every tool shares it) -----

inline int64_t parseInt(const std::string &text, const std::string &what) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0) throw UserError(what + ": expected an integer, got '" + text + "'");
  return v;
}

inline double parseDouble(const std::string &text, const std::string &what) {
  char *end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v))
    throw UserError(what + ": expected a number, got '" + text + "'");
  return v;
}

inline int64_t parseSize(const std::string &text, const std::string &what) {
  if (text.empty()) throw UserError(what + ": expected a size such as 16G, got ''");
  std::string num = text;
  double mult = 1;
  char last = num.back();
  const std::string units = "KMGT";
  size_t u = units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(last))));
  if (u != std::string::npos) {
    mult = std::pow(1024.0, double(u + 1));
    num.pop_back();
  } else if (last == 'B' || last == 'b') {
    num.pop_back();
  }
  char *end = nullptr;
  double v = std::strtod(num.c_str(), &end);
  if (num.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
    throw UserError(what + ": expected a size such as 16G or 1.5T, got '" + text + "'");
  return static_cast<int64_t>(std::llround(v * mult));
}

inline size_t editDistance(const std::string &a, const std::string &b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    prev.swap(cur);
  }
  return prev[b.size()];
}

inline Args parse(int argc, char **argv, int first, const std::set<std::string> &valued,
                  const std::set<std::string> &switches, const std::string &command) {
  Args out;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string name = a, value;
      bool hasValue = false;
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        hasValue = true;
      }
      if (valued.count(name)) {
        if (!hasValue) {
          if (i + 1 >= argc) throw UserError(command + ": option " + name + " needs a value");
          value = argv[++i];
        }
        out.values[name] = value;
      } else if (switches.count(name)) {
        if (hasValue) throw UserError(command + ": option " + name + " takes no value");
        out.values[name] = "";
      } else {
        std::string best;
        size_t bestD = 4;
        for (const auto *set : {&valued, &switches})
          for (const auto &c : *set) {
            size_t d = editDistance(name, c);
            if (d < bestD) bestD = d, best = c;
          }
        throw UserError(command + ": unknown option '" + name + "'" +
                        (best.empty() ? std::string() : "; did you mean '" + best + "'?") + " (see --help)");
      }
    } else if (a == "-o") {
      if (i + 1 >= argc) throw UserError(command + ": option -o needs a file name");
      out.values["-o"] = argv[++i];
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      throw UserError(command + ": unknown option '" + a + "' (see --help)");
    } else {
      out.positional.push_back(a);
    }
  }
  return out;
}

inline int64_t Args::integer(const std::string &name, int64_t dflt) const {
  return has(name) ? parseInt(str(name), name) : dflt;
}
inline double Args::number(const std::string &name, double dflt) const {
  return has(name) ? parseDouble(str(name), name) : dflt;
}
inline int64_t Args::size(const std::string &name, int64_t dflt) const {
  return has(name) ? parseSize(str(name), name) : dflt;
}

} // namespace bigc::cli
