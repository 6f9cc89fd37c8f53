#include "distributed/flight_analysis.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "base/error.h"

namespace rt::dist::flight {
namespace {

std::string clock_time(double unix_s) {
  if (unix_s <= 0) return "?";
  const time_t t = time_t(unix_s);
  tm local{};
  localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &local);
  return buf;
}

std::string size_text(int64_t bytes) {
  char buf[32];
  if (bytes < 1024)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else if (bytes < (int64_t(1) << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(bytes) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  return buf;
}

// "all_reduce #12 (gradients, bucket 3, step 5, f32 x 1000, 3.9 KiB)"
std::string call_text(const Record& r, bool with_seq = true) {
  std::string s = r.op;
  if (with_seq) s += " #" + std::to_string(r.seq);
  s += " (" + r.purpose;
  if (r.bucket >= 0) s += ", bucket " + std::to_string(r.bucket);
  if (r.step >= 0) s += ", step " + std::to_string(r.step);
  s += ", " + r.dtype + " x " + std::to_string(r.numel) + ", " + size_text(r.bytes) + ")";
  return s;
}

// What must be the same on every rank for the same call.
std::string signature(const Record& r) { return r.op + "/" + r.dtype + "/" + std::to_string(r.numel); }

bool finished(const Record& r) { return r.state == CallState::completed || r.state == CallState::failed; }

struct RankView {
  const RankRecords* ranks;
  std::map<uint64_t, const Record*> by_seq;  // this communicator's calls
};

// What the launcher saw of the rank: its process, and where its main thread was.
std::string fate_of(const RankRecords& r) {
  std::string out;
  if (!r.fate.empty()) out += "; rank " + std::to_string(r.rank) + ": " + r.fate;
  if (!r.main_thread.empty()) out += "; rank " + std::to_string(r.rank) + "'s main thread is in " + r.main_thread;
  return out;
}

// "rank 3" or "ranks 1, 2": the ranks a sentence is about.
std::string ranks_text(const std::vector<int>& ranks) {
  return "rank" + std::string(ranks.size() > 1 ? "s " : " ") + rank_list(ranks);
}

// One collective's records, grouped by signature (the ranks that agree on the call).
using BySignature = std::map<std::string, std::vector<const RankView*>>;

// Collective #s, issued with different signatures: which ranks issued what, and, where the odd
// call is the majority's next one (or a later bucket of the same step), that those ranks
// skipped #s.
std::string disagreement(uint64_t s, const std::string& on, const BySignature& by_sig) {
  const auto most = std::max_element(
      by_sig.begin(), by_sig.end(), [](const auto& a, const auto& b) { return a.second.size() < b.second.size(); });
  const Record& common = *most->second.front()->by_seq.at(s);
  std::string out = "ranks disagree on collective #" + std::to_string(s) + on + ":";
  std::string skipped;
  for (const auto& [sig, vs] : by_sig) {
    if (sig == most->first) continue;
    std::vector<int> who;
    for (const RankView* v : vs) who.push_back(v->ranks->rank);
    const Record& odd = *vs.front()->by_seq.at(s);
    out += " " + ranks_text(who) + " issued " + call_text(odd, false) + ";";
    // The odd call is the others' next one (or a later bucket of the same step: buckets
    // launch in order, and the others may not have issued it yet): the odd ranks skipped
    // this one.
    const auto next = most->second.front()->by_seq.find(s + 1);
    const std::string them = who.size() > 1 ? "their" : "its";
    const std::string odd_ranks = "; " + ranks_text(who);
    if (next != most->second.front()->by_seq.end() && signature(*next->second) == sig &&
        next->second->bucket == odd.bucket && next->second->purpose == odd.purpose)
      skipped += odd_ranks + " skipped " + call_text(common) + ": " + them + " #" + std::to_string(s) +
                 " is the others' #" + std::to_string(s + 1);
    else if (odd.purpose == "gradients" && common.purpose == "gradients" && odd.step == common.step &&
             odd.bucket > common.bucket)
      skipped += odd_ranks + " skipped " + call_text(common) + ": " + them + " #" + std::to_string(s) +
                 " is bucket " + std::to_string(odd.bucket) + "'s of the same step";
  }
  std::vector<int> others;
  for (const RankView* v : most->second) others.push_back(v->ranks->rank);
  return out + " " + ranks_text(others) + " issued " + call_text(common, false) + skipped + "\n";
}

// Collective #s, entered by the ranks `in` and never by those `absent`: for each absent rank,
// where it was instead (its last completed call, the one it waits in, its step, its fate).
std::string never_entered(uint64_t s, const std::string& on, const std::vector<const RankView*>& in,
                          const std::vector<const RankView*>& absent) {
  const Record& call = *in.front()->by_seq.at(s);
  std::vector<int> waiting, done;
  double since = std::numeric_limits<double>::max();
  for (const RankView* v : in) {
    const Record& r = *v->by_seq.at(s);
    (r.state == CallState::completed ? done : waiting).push_back(v->ranks->rank);
    if (r.state != CallState::completed) since = std::min(since, r.started > 0 ? r.started : r.queued);
  }
  std::string out;
  for (const RankView* a : absent) {
    const RankRecords& rr = *a->ranks;
    out += "rank " + std::to_string(rr.rank) + " never entered " + call_text(call) + on;
    if (!waiting.empty()) out += "; " + ranks_text(waiting) + " have waited in it since " + clock_time(since);
    if (!done.empty()) out += "; " + ranks_text(done) + " completed it";
    const Record* last = nullptr;
    for (auto it = a->by_seq.rbegin(); it != a->by_seq.rend(); ++it)
      if (it->second->state == CallState::completed) {
        last = it->second;
        break;
      }
    out += "; rank " + std::to_string(rr.rank) + "'s last completed collective" + on + " is " +
           (last ? call_text(*last) : std::string("none"));
    if (!a->by_seq.empty() && !finished(*a->by_seq.rbegin()->second))
      out += ", and it waits in " + call_text(*a->by_seq.rbegin()->second);
    if (rr.step >= 0) out += "; rank " + std::to_string(rr.rank) + " was at step " + std::to_string(rr.step);
    out += fate_of(rr) + "\n";
  }
  return out;
}

// Collective #s, entered by every rank: "" when all completed it, else who is still in it and
// who saw it fail.
std::string stuck_in(uint64_t s, const std::string& on, const BySignature& by_sig, const std::vector<RankView>& views) {
  std::vector<int> waiting, done, failed;
  double since = std::numeric_limits<double>::max(), failed_at = 0;
  for (const auto& [sig, vs] : by_sig)
    for (const RankView* v : vs) {
      const Record& r = *v->by_seq.at(s);
      if (r.state == CallState::completed) {
        done.push_back(v->ranks->rank);
      } else if (r.state == CallState::failed) {
        failed.push_back(v->ranks->rank);
        failed_at = std::max(failed_at, r.ended);
      } else {
        waiting.push_back(v->ranks->rank);
        since = std::min(since, r.started > 0 ? r.started : r.queued);
      }
    }
  if (waiting.empty() && failed.empty()) return "";
  const Record& call = *by_sig.begin()->second.front()->by_seq.at(s);
  std::string stuck = "every rank entered " + call_text(call) + on;
  if (!waiting.empty())
    stuck += "; " + ranks_text(waiting) + " did not complete it (in it since " + clock_time(since) + ")";
  if (!failed.empty()) stuck += "; on " + ranks_text(failed) + " it failed at " + clock_time(failed_at);
  if (!done.empty()) stuck += "; " + ranks_text(done) + " completed it";
  for (const RankView& v : views) stuck += fate_of(*v.ranks);
  return stuck + "\n";
}

// The first divergence on communicator `comm`, or "" when none. The sequence numbers every
// rank's ring still holds are walked in order; the first that ranks disagree on, or that a rank
// never entered, is the answer, after the first call every rank entered and some did not
// complete (which the divergence after it may explain).
std::string diverge(const std::string& comm, const std::vector<RankView>& views) {
  uint64_t lo = 0, hi = 0;
  bool any = false;
  for (const RankView& v : views) {
    if (v.ranks->recorded > uint64_t(v.ranks->capacity) && !v.by_seq.empty())
      lo = std::max(lo, v.by_seq.begin()->first);  // what this rank's ring forgot
    if (!v.by_seq.empty()) {
      hi = std::max(hi, v.by_seq.rbegin()->first);
      any = true;
    }
  }
  if (!any) return "";
  const std::string on = " on " + comm;
  std::string stuck;  // a call every rank entered and some did not complete: the next divergence may say more
  for (uint64_t s = lo; s <= hi; ++s) {
    BySignature by_sig;
    std::vector<const RankView*> absent;
    for (const RankView& v : views) {
      const auto it = v.by_seq.find(s);
      if (it != v.by_seq.end())
        by_sig[signature(*it->second)].push_back(&v);
      else if (v.by_seq.empty() || v.by_seq.rbegin()->first < s)
        absent.push_back(&v);
      // else: a slot torn or overwritten on this rank; the others decide
    }
    if (by_sig.size() > 1) return stuck + disagreement(s, on, by_sig);
    if (!absent.empty() && !by_sig.empty()) return stuck + never_entered(s, on, by_sig.begin()->second, absent);
    if (stuck.empty()) stuck = stuck_in(s, on, by_sig, views);
  }
  return stuck;
}

}  // namespace

std::vector<RankRecords> read_run_dir(const std::string& run_dir, std::vector<std::string>& problems) {
  namespace fs = std::filesystem;
  const fs::path logs = fs::path(run_dir) / "logs";
  RT_CHECK(fs::is_directory(logs), run_dir, " has no logs/ directory: give the run directory of a data-parallel run ",
           "(the one holding logs/rank-0.log)");
  std::vector<RankRecords> out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(logs)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("flight-rank-", 0) == 0 && e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    try {
      std::ifstream in(f, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      RT_CHECK(in.good() || in.eof(), f.string(), ": cannot read it");
      out.push_back(from_json(text.str(), f.string()));
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  return out;
}

void keep_one_run(std::vector<RankRecords>& ranks, std::vector<std::string>& problems, double window_s) {
  if (ranks.empty()) return;
  const RankRecords* newest = &ranks[0];
  for (const RankRecords& r : ranks)
    if (r.written > newest->written) newest = &r;
  const int world = newest->world;
  const double since = newest->written - window_s;
  std::vector<RankRecords> kept;
  for (RankRecords& r : ranks) {
    if (r.world != world)
      problems.push_back("rank " + std::to_string(r.rank) + "'s records: a world of " + std::to_string(r.world) +
                         ", the newest records' is " + std::to_string(world) + " (an earlier run's file?)");
    else if (r.written < since)
      problems.push_back("rank " + std::to_string(r.rank) + "'s records: written " +
                         std::to_string(int64_t(newest->written - r.written)) +
                         " s before the newest (an earlier run's file?)");
    else
      kept.push_back(std::move(r));
  }
  ranks = std::move(kept);
}

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string analyze(const std::vector<RankRecords>& ranks, int world) {
  std::string out;
  std::set<int> have;
  for (const RankRecords& r : ranks) have.insert(r.rank);
  std::vector<int> missing;
  for (int r = 0; r < world; ++r)
    if (!have.count(r)) missing.push_back(r);
  if (!missing.empty())
    out += "no flight records from rank" + std::string(missing.size() > 1 ? "s " : " ") + rank_list(missing) + "\n";
  std::set<std::string> comms;
  for (const RankRecords& r : ranks)
    for (const Record& rec : r.records) comms.insert(rec.comm);
  for (const std::string& comm : comms) {
    std::vector<RankView> views;
    for (const RankRecords& r : ranks) {
      RankView v{&r, {}};
      for (const Record& rec : r.records)
        if (rec.comm == comm) v.by_seq[rec.seq] = &rec;
      views.push_back(std::move(v));
    }
    const std::string d = diverge(comm, views);
    if (!d.empty()) {
      out += d;
      continue;
    }
    uint64_t last = 0;
    for (const RankView& v : views)
      if (!v.by_seq.empty()) last = std::max(last, v.by_seq.rbegin()->first);
    out += "on " + comm + " the ranks agree: every rank issued and completed collectives up to #" +
           std::to_string(last) + "\n";
  }
  if (comms.empty() && !ranks.empty()) out += "no collective was recorded\n";
  return out;
}

}  // namespace rt::dist::flight
