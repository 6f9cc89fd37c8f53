// Helpers shared by the benchmarks: command-line flags (a table of cli/flags.h rows), medians,
// JSON output, and how busy the machine was apart from the benchmark itself.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/usage_error.h"
#include "cli/flags.h"

namespace rt::bench {

// Under `bazel run` the working directory is the runfiles tree; paths the user typed are
// relative to where they typed them.
inline std::string user_path(const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  return wd ? std::string(wd) + "/" + p : p;
}

// The values of an integer flag that is read into an int: lo .. INT_MAX.
inline rt::cli::Range int_at_least(int lo) {
  return rt::cli::Range{double(lo), double(INT_MAX), false,
                        "in [" + std::to_string(lo) + ", " + std::to_string(INT_MAX) + "]"};
}

// A benchmark's flags: argv[1..] parsed against `table` ("--name value", "--name=value", a
// bare "--name" for a boolean). --help or -h anywhere prints the table's help under
// `usage_line` to stdout and exits 0. A bad command line (an unknown flag, a value of the
// wrong type, outside its range or not among its choices) throws rt::UsageError naming the flag.
inline rt::cli::Flags parse_flags(int argc, char** argv, std::vector<rt::cli::Flag> table,
                                  const std::string& usage_line) {
  rt::cli::Flags flags(std::move(table));
  const std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::printf("%s\n", flags.help(usage_line).c_str());
      std::exit(0);
    }
  flags.parse(args);
  return flags;
}

// What main() does with a UsageError: "<binary>: <message>" and the help of `table` on
// stderr. Returns the exit status of a bad command line, 2.
inline int usage_failure(const char* binary, const std::exception& e, std::vector<rt::cli::Flag> table,
                         const std::string& usage_line) {
  std::fprintf(stderr, "%s: %s\n%s\n", binary, e.what(), rt::cli::Flags(std::move(table)).help(usage_line).c_str());
  return 2;
}

// A benchmark's main(): run(parse(argc, argv)), whose status it returns. A UsageError is
// answered as usage_failure does (the flags' help from table(), status 2); any other exception
// is printed as "<binary>: <message>", status 1.
template <typename Options>
int bench_main(const char* binary, int argc, char** argv, Options (*parse)(int, char**), int (*run)(const Options&),
               std::vector<rt::cli::Flag> (*table)(), const std::string& usage_line) {
  try {
    return run(parse(argc, argv));
  } catch (const rt::UsageError& e) {
    return usage_failure(binary, e, table(), usage_line);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", binary, e.what());
    return 1;
  }
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

using Clock = std::chrono::steady_clock;
inline double s_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
inline double ms_between(Clock::time_point a, Clock::time_point b) { return 1e3 * s_between(a, b); }

// How busy the machine was apart from this process: on 2 cores anything else running (a
// build, a test) distorts the timings, and the run says so.
inline constexpr double kBusyShare = 0.02;  // above this, warn

struct CpuSample {
  Clock::time_point t;
  double busy_s = -1;  // all CPUs' non-idle time since boot (/proc/stat), incl. steal; -1: unknown
  double own_s = 0;    // this process's CPU time, all threads
};

inline CpuSample sample_cpu() {
  CpuSample c;
  c.t = Clock::now();
  std::ifstream f("/proc/stat");
  std::string cpu;
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal && cpu == "cpu")
    c.busy_s = double(user + nice + system + irq + softirq + steal) / double(sysconf(_SC_CLK_TCK));
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  c.own_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  return c;
}

// The share of all CPUs' time between a and b that other processes used (0..1; -1 unknown).
inline double others_cpu_share(const CpuSample& a, const CpuSample& b) {
  if (a.busy_s < 0 || b.busy_s < 0) return -1;
  const double wall_s = s_between(a.t, b.t);
  const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (wall_s <= 0 || ncpu < 1) return -1;
  return std::max(0.0, (b.busy_s - a.busy_s) - (b.own_s - a.own_s)) / (wall_s * double(ncpu));
}

// JSON string and number literals.
inline std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      o += buf;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A JSON array of numbers, num() each: "[1, 2.5, 3]".
inline std::string num_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + num(v[i]);
  return s + "]";
}

// Writes a benchmark's --json file: `text` as it is, replacing the file. Throws
// std::runtime_error naming the path when it cannot be created or written whole (a full
// disk), so a comparison script never reads a truncated result as a real one.
inline void write_json_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
  out << text;
  out.flush();
  if (!out) throw std::runtime_error("error writing '" + path + "'");
}

}  // namespace rt::bench
