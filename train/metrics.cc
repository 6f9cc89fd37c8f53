#include "train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "base/error.h"

namespace rt::train {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "a");
  RT_CHECK(f_, "cannot open metrics file '", path, "' for appending: ", std::strerror(errno),
           " (is --output-dir writable?)");
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const json::Value& record) {
  const std::string line = json::dump(record) + "\n";
  RT_CHECK(std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0,
           "writing metrics to '", path_, "' failed: ", std::strerror(errno), " (disk full?)");
}

int64_t set_aside_redone_records(const std::string& path, const std::string& replaced_path, int64_t from_epoch,
                                 int64_t from_step) {
  std::ifstream in(path);
  if (!in) return 0;  // no metrics yet
  std::string kept, moved;
  int64_t count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    bool redone = false;
    try {
      const json::Value v = json::parse(line);
      const json::Value* step = v.find("step");
      const json::Value* type = v.find("type");
      const json::Value* epoch = v.find("epoch");
      const std::string kind = type && type->is_string() ? type->as_string() : "";
      const bool per_epoch = kind == "eval" || kind == "memory";
      if (per_epoch && epoch && epoch->is_number())
        redone = int64_t(epoch->as_double()) >= from_epoch;
      else if (step && step->is_number() && kind != "restart")
        redone = int64_t(step->as_double()) > from_step;
    } catch (const std::exception&) {
      // A torn last line (a process killed mid-write): kept as it is, not guessed at.
    }
    (redone ? moved : kept) += line + "\n";
    count += redone;
  }
  in.close();
  if (count == 0) return 0;
  {
    std::ofstream out(replaced_path, std::ios::app);
    out << moved;
    out.flush();
    RT_CHECK(out.good(), "cannot append to '", replaced_path, "' (the metrics records a resumed run writes again): ",
             std::strerror(errno));
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    out.flush();
    RT_CHECK(out.good(), "cannot write '", tmp, "': ", std::strerror(errno), " (disk full?)");
  }
  RT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot replace '", path, "' with '", tmp,
           "': ", std::strerror(errno));
  return count;
}

void topk_hits(const float* logits, const int64_t* labels, int64_t N, int64_t K, int64_t* top1, int64_t* top5,
               int64_t* nonfinite) {
  for (int64_t i = 0; i < N; ++i) {
    const float* z = logits + i * K;
    bool finite = true;
    for (int64_t k = 0; k < K; ++k) finite &= std::isfinite(z[k]);
    if (!finite) {  // NaN compares false with everything: it would rank first
      ++*nonfinite;
      continue;
    }
    const int64_t y = labels[i];
    const float zy = z[y];
    int64_t rank = 0;  // classes ranked before the label
    for (int64_t k = 0; k < K; ++k) rank += z[k] > zy || (z[k] == zy && k < y);
    *top1 += rank < 1;
    *top5 += rank < 5;
  }
}

}  // namespace rt::train
