// <output-dir>/metrics.jsonl: one JSON object per logged training step and per evaluation,
// appended and flushed line by line (a resumed run continues the same file).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/io/json.h"

namespace rt::train {

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path);  // throws naming the path when it cannot be opened
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const json::Value& record);

 private:
  std::string path_;
  FILE* f_ = nullptr;
};

// Note [Metrics of a resumed run]
// A run resumed from a checkpoint (by hand, or by the launcher after a failure:
// Note [Elastic restarts] in distributed/local_launcher.cc) redoes the steps its predecessor ran after the
// checkpoint, and logs them again. So before it appends, the logging rank moves the records it
// will write again out of metrics.jsonl: training records (and others that name a step) after
// the checkpoint's step, and evaluation and memory records of its epoch or later (a checkpoint
// taken within an epoch, or at its last step before the evaluation, evaluates that epoch again).
// They are appended to logs/metrics-replaced.jsonl first (nothing saved is lost) and the file
// is then replaced whole (a rename). Records without a step (the run's end) stay.
// `from_epoch`/`from_step`: the checkpoint's progress (0/0 for a run from the start). Returns
// the number of records moved.
int64_t set_aside_redone_records(const std::string& path, const std::string& replaced_path, int64_t from_epoch,
                                 int64_t from_step);

// Top-1 and top-5 hits of a batch: logits (N x K) row-major, labels (N). A label counts
// as within top-k when fewer than k logits beat it (ties go to the lower class index,
// like a stable sort). An example with a NaN or Inf logit is a miss, counted in
// `nonfinite` (a diverged model must not score 100%).
void topk_hits(const float* logits, const int64_t* labels, int64_t N, int64_t K, int64_t* top1, int64_t* top5,
               int64_t* nonfinite);

}  // namespace rt::train
