#include "profile/report.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "base/error.h"

namespace rt::prof {
namespace {

// The dtype named in a row ("" or unknown: `fallback`).
DType parse_dtype_or(const std::string& name, DType fallback) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (name == kDTypeNames[i]) return DType(i);
  return fallback;
}

std::string pass_of(const Event& e) {
  if (e.backward) return "backward";
  return e.phase.empty() ? "other" : e.phase;
}

// The first input's dtype in an op's description ("[8,64,56,56] f32 NHWC, ...").
std::string dtype_of(const std::string& detail) {
  const size_t close = detail.find("] ");
  if (close == std::string::npos) return "";
  const size_t b = close + 2, e = detail.find_first_of(" ,", b);
  return detail.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

bool is_comm_kernel(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return lower.find("nccl") != std::string::npos;
}

// Rows keyed by (name, pass), in first-seen order until sorted.
class Rows {
 public:
  Row& at(const std::string& name, const std::string& pass, const std::string& dtype) {
    const std::string key = name + '\x1f' + pass;
    const auto it = index_.find(key);
    if (it != index_.end()) return rows_[it->second];
    index_.emplace(key, rows_.size());
    rows_.push_back(Row{name, pass, dtype});
    return rows_.back();
  }
  std::vector<Row> sorted() && {
    std::stable_sort(rows_.begin(), rows_.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
    return std::move(rows_);
  }

 private:
  std::vector<Row> rows_;
  std::unordered_map<std::string, size_t> index_;
};

// Total length of the union of intervals (ns).
int64_t union_ns(std::vector<std::pair<int64_t, int64_t>> iv) {
  std::sort(iv.begin(), iv.end());
  int64_t total = 0, cur_b = 0, cur_e = -1;
  for (const auto& [b, e] : iv) {
    if (b > cur_e) {
      if (cur_e > cur_b) total += cur_e - cur_b;
      cur_b = b;
      cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  if (cur_e > cur_b) total += cur_e - cur_b;
  return total;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return fmt(u == 0 ? "%.0f" : "%.1f", b) + " " + units[u];
}

json::Value row_json(const Row& r, const Profile& p) {
  json::Value o = json::Value::object();
  o.set("name", r.name);
  o.set("pass", r.pass);
  o.set("dtype", r.dtype);
  o.set("calls", r.calls);
  o.set("seconds", r.seconds);
  o.set("host_seconds", r.host_seconds);
  o.set("flops", r.flops);
  o.set("bytes", r.bytes);
  if (r.seconds > 0) {
    o.set("gflops_per_s", r.flops / r.seconds / 1e9);
    o.set("gbytes_per_s", r.bytes / r.seconds / 1e9);
    const DType t = r.dtype.empty() ? DType::f32 : parse_dtype_or(r.dtype, DType::f32);
    if (const double pf = p.peaks.flops_for(t, p.tf32); pf > 0) o.set("flops_peak_fraction", r.flops / r.seconds / pf);
    if (p.peaks.copy_bytes_per_s > 0) o.set("bandwidth_peak_fraction", r.bytes / r.seconds / p.peaks.copy_bytes_per_s);
  }
  return o;
}

}  // namespace

const char* group_name(Group g) { return g == Group::op ? "op" : g == Group::layer ? "layer" : "kernel"; }

Group parse_group(const std::string& s) {
  if (s == "op") return Group::op;
  if (s == "layer") return Group::layer;
  if (s == "kernel") return Group::kernel;
  RT_FAIL("profile group must be op, layer or kernel, got '", s, "'");
}

const std::vector<Row>& Profile::rows(Group g) const {
  return g == Group::op ? by_op : g == Group::layer ? by_layer : by_kernel;
}

Profile summarize(const std::vector<Event>& events, Device device, const DevicePeaks& peaks, bool tf32,
                  int64_t first_step, int64_t end_step) {
  Profile p;
  p.device = device.str();
  p.gpu = device.is_cuda();
  p.peaks = peaks;
  p.tf32 = tf32;
  p.first_step = first_step;
  p.end_step = end_step;
  Totals& t = p.totals;

  // Steps and phases (wall time), and each op's GPU time from its kernels.
  std::vector<std::pair<int64_t, int64_t>> steps;
  std::unordered_map<uint64_t, double> gpu_s;  // op id -> its kernels' seconds
  std::unordered_map<uint64_t, const Event*> op_of;
  for (const Event& e : events)
    if (e.kind == EventKind::op) op_of[e.id] = &e;
  Rows kernels;
  for (const Event& e : events) {
    const double s = double(e.end_ns - e.begin_ns) / 1e9;
    switch (e.kind) {
      case EventKind::step:
        ++t.steps;
        t.wall_s += s;
        steps.emplace_back(e.begin_ns, e.end_ns);
        break;
      case EventKind::phase:
        if (e.name == "forward") t.forward_s += s;
        else if (e.name == "backward") t.backward_s += s;
        else if (e.name == "optimizer") t.optimizer_s += s;
        else if (e.name == "data") t.data_s += s;
        break;
      case EventKind::kernel:
      case EventKind::memcpy:
      case EventKind::memset: {
        if (e.kind != EventKind::kernel) t.gpu_copy_s += s;
        else if (is_comm_kernel(e.name)) t.gpu_comm_s += s;
        else t.gpu_compute_s += s;
        const auto owner = op_of.find(e.id);
        if (owner != op_of.end()) gpu_s[e.id] += s;
        Row& r = kernels.at(e.name, owner == op_of.end() ? "other" : pass_of(*owner->second),
                            owner == op_of.end() ? "" : dtype_of(owner->second->detail));
        ++r.calls;
        r.seconds += s;
        r.host_seconds += 0;
        break;
      }
      default: break;
    }
  }
  if (p.gpu) {
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Event& e : events)
      if (e.kind == EventKind::kernel || e.kind == EventKind::memcpy || e.kind == EventKind::memset)
        busy.emplace_back(e.begin_ns, e.end_ns);
    // Idle: each step's time not covered by any GPU activity inside it.
    for (const auto& [sb, se] : steps) {
      std::vector<std::pair<int64_t, int64_t>> in;
      for (const auto& [b, e] : busy)
        if (e > sb && b < se) in.emplace_back(std::max(b, sb), std::min(e, se));
      t.gpu_idle_s += double((se - sb) - union_ns(std::move(in))) / 1e9;
    }
  }

  // Ops by op and by layer.
  Rows ops, layers;
  for (const Event& e : events) {
    if (e.kind != EventKind::op) continue;
    const double host = double(e.self_ns()) / 1e9;
    const auto g = gpu_s.find(e.id);
    const double time = p.gpu ? (g == gpu_s.end() ? 0.0 : g->second) : host;
    const std::string pass = pass_of(e), dt = dtype_of(e.detail);
    for (Row* r : {&ops.at(e.name, pass, dt), &layers.at(e.path.empty() ? "(outside layers)" : e.path, pass, dt)}) {
      ++r->calls;
      r->seconds += time;
      r->host_seconds += host;
      r->flops += e.cost.flops;
      r->bytes += e.cost.bytes;
    }
    t.op_s += host;
    t.flops += e.cost.flops;
    t.bytes += e.cost.bytes;
  }
  if (!p.gpu) t.outside_ops_s = std::max(0.0, t.wall_s - t.op_s);
  p.by_op = std::move(ops).sorted();
  p.by_layer = std::move(layers).sorted();
  // On the CPU each op call is its own kernel: the kernel table is the op table.
  p.by_kernel = p.gpu ? std::move(kernels).sorted() : p.by_op;
  return p;
}

std::string format_table(const Profile& p, Group g, int top) {
  const Totals& t = p.totals;
  const double per = t.steps > 0 ? 1.0 / double(t.steps) : 0.0;
  std::string out = "profile of steps " + std::to_string(p.first_step + 1) + "-" + std::to_string(p.end_step) + " on " +
                    p.device + " (" + p.peaks.key + "): copy bandwidth " +
                    fmt("%.1f", p.peaks.copy_bytes_per_s / 1e9) + " GB/s measured";
  for (const auto& [k, v] : p.peaks.flops) out += ", " + k + " " + fmt("%.4g", v / 1e9) + " GFLOP/s";
  if (!p.peaks.flops_source.empty()) out += " (" + p.peaks.flops_source + ")";
  out += "\n";
  const char* time_label = p.gpu ? "GPU ms/step" : "ms/step";
  char line[512];
  std::snprintf(line, sizeof line, "%-44s %-9s %6s %11s %8s %6s %9s %6s %8s %5s%s\n", group_name(g), "pass",
                "calls", time_label, "mean us", "%step", "GFLOP/s", "%peak", "GB/s", "%bw", p.gpu ? "  host ms/step" : "");
  out += line;
  const std::vector<Row>& rows = p.rows(g);
  double rest_s = 0;
  int64_t rest_n = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (int(i) >= top) {
      rest_s += r.seconds;
      ++rest_n;
      continue;
    }
    const double gf = r.seconds > 0 ? r.flops / r.seconds : 0, gb = r.seconds > 0 ? r.bytes / r.seconds : 0;
    const double pf = p.peaks.flops_for(parse_dtype_or(r.dtype, DType::f32), p.tf32);
    const std::string name = r.name.size() > 44 ? r.name.substr(0, 41) + "..." : r.name;
    std::snprintf(line, sizeof line, "%-44s %-9s %6.1f %11.3f %8.1f %5.1f%% %9.1f %6s %8.2f %5s%s\n", name.c_str(),
                  r.pass.c_str(), double(r.calls) * per, r.seconds * 1e3 * per,
                  r.calls ? r.seconds / double(r.calls) * 1e6 : 0.0, t.wall_s > 0 ? 100 * r.seconds / t.wall_s : 0.0,
                  gf / 1e9, r.flops > 0 && pf > 0 ? (fmt("%.1f", 100 * gf / pf) + "%").c_str() : "-", gb / 1e9,
                  r.bytes > 0 && p.peaks.copy_bytes_per_s > 0
                      ? (fmt("%.0f", 100 * gb / p.peaks.copy_bytes_per_s) + "%").c_str()
                      : "-",
                  p.gpu ? fmt("  %12.3f", r.host_seconds * 1e3 * per).c_str() : "");
    out += line;
  }
  if (rest_n > 0) out += "... " + std::to_string(rest_n) + " more rows: " + fmt("%.3f", rest_s * 1e3 * per) + " ms/step\n";
  out += "per step (mean of " + std::to_string(t.steps) + "): wall " + fmt("%.3f", t.wall_s * 1e3 * per) + " ms";
  if (p.gpu) {
    out += "; GPU: compute " + fmt("%.3f", t.gpu_compute_s * 1e3 * per) + " ms, communication " +
           fmt("%.3f", t.gpu_comm_s * 1e3 * per) + " ms, copies " + fmt("%.3f", t.gpu_copy_s * 1e3 * per) +
           " ms, idle " + fmt("%.3f", t.gpu_idle_s * 1e3 * per) + " ms; host in ops " + fmt("%.3f", t.op_s * 1e3 * per) +
           " ms";
  } else {
    out += " = ops " + fmt("%.3f", t.op_s * 1e3 * per) + " ms (" + fmt("%.1f", t.wall_s > 0 ? 100 * t.op_s / t.wall_s : 0) +
           "%) + outside ops " + fmt("%.3f", t.outside_ops_s * 1e3 * per) + " ms (autograd, data, loop)";
  }
  out += "\n  phases: data " + fmt("%.3f", t.data_s * 1e3 * per) + " ms, forward " + fmt("%.3f", t.forward_s * 1e3 * per) +
         " ms, backward " + fmt("%.3f", t.backward_s * 1e3 * per) + " ms, optimizer " +
         fmt("%.3f", t.optimizer_s * 1e3 * per) + " ms; work " + fmt("%.2f", t.flops * per / 1e9) + " GFLOP, " +
         human_bytes(t.bytes * per) + " moved per step\n";
  return out;
}

json::Value to_json(const Profile& p) {
  const Totals& t = p.totals;
  json::Value peaks = json::Value::object();
  peaks.set("key", p.peaks.key);
  peaks.set("copy_bytes_per_s", p.peaks.copy_bytes_per_s);
  json::Value fl = json::Value::object();
  for (const auto& [k, v] : p.peaks.flops) fl.set(k, v);
  peaks.set("flops", std::move(fl));
  peaks.set("flops_source", p.peaks.flops_source);
  json::Value totals = json::Value::object();
  totals.set("steps", t.steps);
  totals.set("wall_seconds", t.wall_s);
  totals.set("op_seconds", t.op_s);
  totals.set("outside_ops_seconds", t.outside_ops_s);
  totals.set("forward_seconds", t.forward_s);
  totals.set("backward_seconds", t.backward_s);
  totals.set("optimizer_seconds", t.optimizer_s);
  totals.set("data_seconds", t.data_s);
  if (p.gpu) {
    totals.set("gpu_compute_seconds", t.gpu_compute_s);
    totals.set("gpu_comm_seconds", t.gpu_comm_s);
    totals.set("gpu_copy_seconds", t.gpu_copy_s);
    totals.set("gpu_idle_seconds", t.gpu_idle_s);
  }
  totals.set("flops", t.flops);
  totals.set("bytes", t.bytes);
  json::Value o = json::Value::object();
  o.set("device", p.device);
  o.set("first_step", p.first_step + 1);  // 1-based, like the log lines
  o.set("last_step", p.end_step);
  o.set("peaks", std::move(peaks));
  o.set("totals", std::move(totals));
  for (Group g : {Group::op, Group::layer, Group::kernel}) {
    json::Value rows = json::Value::array();
    for (const Row& r : p.rows(g)) rows.push_back(row_json(r, p));
    o.set(std::string("by_") + group_name(g), std::move(rows));
  }
  return o;
}

}  // namespace rt::prof
