// `ringtape plot RUN_DIR [RUN_DIR...] [-o OUT.svg|OUT.png]`: the metrics.jsonl of one or
// more training runs (cli/plot_data.h) drawn as one standalone SVG of four panels: training
// loss, learning rate and throughput against the step, evaluation top-1 and top-5 against
// the epoch. Runs are overlaid, one colour each, named in a legend.
//
// It writes only the file asked for (default <first RUN_DIR>/plot.svg), which must end in
// .svg or .png, so it can never replace a run's other files; with an .svg output and
// rsvg-convert on PATH, also the PNG of the same name (--no-png: not). Each file is written
// to a temporary name beside it and renamed into place: a reader never sees half a plot.
#pragma once

#include <string>
#include <vector>

#include "cli/plot_data.h"

namespace rt::cli {

// The SVG document for `runs`, named `labels` (run_labels) in the legend.
std::string plot_svg(const std::vector<RunMetrics>& runs, const std::vector<std::string>& labels);

// `ringtape plot ...`: reads the runs, writes the plot and prints where; warnings (a line
// cut short, a run with no records yet) go to stderr. Returns the exit status (0). Throws
// UsageError (cli/flags.h) on a bad command line or a directory that is not a run,
// rt::Error when a file cannot be read or written or a PNG is asked for without rsvg-convert.
int plot_command(const std::vector<std::string>& args);

}  // namespace rt::cli
