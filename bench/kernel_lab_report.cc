// The kernel lab's step report (profile/kernel_lab.h, docs/kernel-lab.md): the records of
// one emulated training step at a few small batches (RINGTAPE_EMU_PERF files), extrapolated
// to --target-batch and bounded on an H200. bench/run_kernel_lab.sh makes the records and
// runs this.
//
//   kernel_lab_report --runs 1:lab-b1.json,2:lab-b2.json,4:lab-b4.json [--target-batch 256]
//       [--top 15] [--json report.json] [--svg roofline.svg] [--title TEXT]
//
// Prints the table and the step's bound; writes the JSON and the SVG roofline when asked.
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/usage_error.h"
#include "bench/bench_util.h"
#include "cli/flags.h"
#include "engine/io/json.h"
#include "profile/kernel_lab.h"

namespace {

const char* kUsage =
    "usage: kernel_lab_report --runs B:FILE,B:FILE[,...] [--target-batch N] [--top N] [--json PATH] [--svg PATH] "
    "[--title TEXT]";

std::vector<rt::cli::Flag> flag_table() {
  using rt::bench::int_at_least;
  using rt::cli::FlagType;
  using rt::cli::Topic;
  return {
      {"runs", FlagType::string, "", "the step's records at each measured batch: BATCH:FILE, comma-separated"},
      {"target-batch", FlagType::integer, "256", "the batch to extrapolate to", {}, Topic::output, int_at_least(1)},
      {"top", FlagType::integer, "15", "table rows (0: all)", {}, Topic::output, int_at_least(0)},
      {"json", FlagType::string, "", "write the report's JSON here"},
      {"svg", FlagType::string, "", "write the roofline here"},
      {"title", FlagType::string, "kernel lab: one training step on an H200", "the roofline's title"},
  };
}

std::vector<std::pair<int, std::string>> parse_runs(const std::string& spec) {
  std::vector<std::pair<int, std::string>> runs;
  size_t start = 0;
  while (start <= spec.size() && !spec.empty()) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, end - start);
    const size_t colon = item.find(':');
    int batch = 0;
    size_t used = 0;
    try {
      batch = std::stoi(item.substr(0, colon), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (colon == std::string::npos || used != colon || batch < 1 || colon + 1 >= item.size())
      throw rt::UsageError("--runs takes BATCH:FILE items separated by commas (e.g. 1:b1.json,2:b2.json), got '" +
                           item + "'");
    runs.emplace_back(batch, rt::bench::user_path(item.substr(colon + 1)));
    start = end + 1;
  }
  if (runs.size() < 2) throw rt::UsageError("--runs needs the step at two batches at least (e.g. 1:b1.json,2:b2.json)");
  return runs;
}

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    RT_CHECK(f << text, "kernel_lab_report: cannot write ", tmp);
  }
  RT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "kernel_lab_report: cannot rename ", tmp, " to ", path);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const rt::cli::Flags f = rt::bench::parse_flags(argc, argv, flag_table(), kUsage);
    const auto runs = parse_runs(f.str("runs"));
    const rt::prof::lab::Lab lab = rt::prof::lab::load(runs, int(f.integer("target-batch")));
    std::printf("%s", rt::prof::lab::table(lab, int(f.integer("top"))).c_str());
    if (!f.str("json").empty()) write_file(rt::bench::user_path(f.str("json")), rt::json::dump(rt::prof::lab::to_json(lab)) + "\n");
    if (!f.str("svg").empty())
      write_file(rt::bench::user_path(f.str("svg")), rt::prof::lab::roofline_svg(lab, f.str("title")));
    return 0;
  } catch (const rt::UsageError& e) {
    return rt::bench::usage_failure("kernel_lab_report", e, flag_table(), kUsage);
  } catch (const rt::Error& e) {
    std::fprintf(stderr, "kernel_lab_report: %s\n", e.what());
    return 1;
  }
}
