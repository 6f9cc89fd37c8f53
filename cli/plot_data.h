// What `ringtape plot` reads: a run directory's metrics.jsonl (train/logging.cc writes it)
// turned into the series the panels draw, and the names the legend gives the runs.
//
// The file is read as it may be found on disk while training runs, or after a crash:
// - a resumed run appends to the same file, so steps can repeat (Note [Resumed runs] below).
// - the last line may be cut short (the run is writing it): ignored, with a warning.
// - a line cut short by a crash and followed by the resumed run's lines is not JSON:
//   skipped, with a warning naming the line.
// - "loss": null (every step of a window skipped on NaN/Inf) is NaN here: a gap.
// - record types other than "train" and "eval" ("overlap") are not plotted.
//
// Note [Resumed runs]
// A train record whose step is not after the previous one starts a new attempt from that
// step; what the earlier attempt logged from there on (train and eval records) is dropped,
// so the later record wins and an abandoned tail does not linger past it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rt::cli {

struct TrainPoint {
  int64_t epoch = 0, step = 0;
  double loss = 0, lr = 0, img_per_s = 0;  // NaN when null or absent
};

struct EvalPoint {
  int64_t epoch = 0, step = 0;  // epoch: 0-based, the epoch that just ended
  double loss = 0, top1 = 0, top5 = 0;  // top1/top5 in percent; NaN when null or absent
};

struct RunMetrics {
  std::string path;                   // the metrics.jsonl read
  std::vector<TrainPoint> train;      // by increasing step, one per step
  std::vector<EvalPoint> eval;        // by increasing epoch, one per epoch
  std::vector<std::string> warnings;  // each names the file and line
};

// Parses the text of a metrics.jsonl; `path` only labels warnings and errors. Throws
// rt::Error when the text has lines but none of them is a record (not a metrics file).
RunMetrics parse_metrics(std::string_view text, const std::string& path);

// <run_dir>/metrics.jsonl, parsed. Throws UsageError (cli/flags.h) naming the path when the
// directory or its metrics.jsonl is missing, rt::Error when it cannot be read.
RunMetrics read_run(const std::string& run_dir);

// The legend's name of each run: its directory's name, with as many parent directories
// as it takes to tell runs of the same name apart ("comm/rt-n1", "compute/rt-n1"); a
// directory given twice gets " (2)".
std::vector<std::string> run_labels(const std::vector<std::string>& run_dirs);

}  // namespace rt::cli
