#include "profile/kernel_lab.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "base/error.h"
#include "cuda_emu/h200.h"

namespace rt::prof::lab {
namespace {

namespace h200 = rt::emu::h200;

double num(const json::Value& r, const char* field) {
  const json::Value* v = r.find(field);
  return v && v->is_number() ? v->as_double() : 0.0;
}
std::string str(const json::Value& r, const char* field) {
  const json::Value* v = r.find(field);
  return v && v->is_string() ? v->as_string() : "";
}
int64_t product3(const json::Value& r, const char* field) {
  const json::Value* v = r.find(field);
  if (!v || !v->is_array()) return 0;
  int64_t p = 1;
  for (const json::Value& d : v->as_array()) p *= d.as_int();
  return p;
}

// The counters a record adds to its row.
Counters counters_of(const json::Value& r) {
  Counters c;
  c.launches = num(r, "launches");
  c.blocks = c.launches * double(product3(r, "grid"));
  c.gld_req = num(r, "global_load_requests"), c.gld_sec = num(r, "global_load_sectors");
  c.gld_ideal = num(r, "global_load_sectors_ideal");
  c.gst_req = num(r, "global_store_requests"), c.gst_sec = num(r, "global_store_sectors");
  c.gst_ideal = num(r, "global_store_sectors_ideal");
  c.shld_req = num(r, "shared_load_requests"), c.shst_req = num(r, "shared_store_requests");
  c.sh_wave = num(r, "shared_wavefronts"), c.sh_conf = num(r, "shared_bank_conflicts");
  c.atomics = num(r, "atomics");
  c.instructions = num(r, "memory_instructions");
  c.lanes = num(r, "active_lanes_per_instruction") * c.instructions;
  c.dram_bytes = num(r, "dram_bytes_lower_bound");
  c.flops = num(r, "flops");
  return c;
}

// Every counter, by name, for the linearity check and the extrapolation.
struct Field {
  const char* name;
  double Counters::*member;
};
constexpr Field kFields[] = {
    {"launches", &Counters::launches},     {"blocks", &Counters::blocks},
    {"global_load_requests", &Counters::gld_req}, {"global_load_sectors", &Counters::gld_sec},
    {"global_load_sectors_ideal", &Counters::gld_ideal}, {"global_store_requests", &Counters::gst_req},
    {"global_store_sectors", &Counters::gst_sec}, {"global_store_sectors_ideal", &Counters::gst_ideal},
    {"shared_load_requests", &Counters::shld_req}, {"shared_store_requests", &Counters::shst_req},
    {"shared_wavefronts", &Counters::sh_wave}, {"shared_bank_conflicts", &Counters::sh_conf},
    {"atomics", &Counters::atomics},       {"memory_instructions", &Counters::instructions},
    {"active_lanes", &Counters::lanes},    {"dram_bytes", &Counters::dram_bytes},
    {"flops", &Counters::flops},
};

void add(Counters& a, const Counters& b) {
  for (const Field& f : kFields) a.*f.member += b.*f.member;
}

// A row's key: a kernel at its launch site; a library operation by its name (its shapes
// change with the batch); a copy or memset by its kind.
std::string row_key(const json::Value& r) {
  const std::string kind = str(r, "kind");
  if (kind == "kernel") return kind + "|" + str(r, "kernel") + "|" + str(r, "site");
  if (kind == "library") return kind + "|" + str(r, "kernel") + "|" + str(r, "site");
  return kind;
}

struct Building {
  Row row;
  double most_launches = -1;  // of the configuration the row's shape is taken from
};

// The line through the two largest batches (Note [Extrapolating the lab]).
void extrapolate(Row& row, const std::vector<int>& batches, int target) {
  const size_t n = batches.size();
  const double b_lo = batches[n - 2], b_hi = batches[n - 1];
  for (const Field& f : kFields) {
    const double lo = row.measured[n - 2].*f.member, hi = row.measured[n - 1].*f.member;
    const double slope = (hi - lo) / (b_hi - b_lo);
    row.target.*f.member = std::max(0.0, hi + (double(target) - b_hi) * slope);
    for (size_t i = 0; i + 2 < n; ++i) {
      const double want = hi + (double(batches[i]) - b_hi) * slope, got = row.measured[i].*f.member;
      if (std::fabs(got - want) > std::max(1.0, 0.02 * std::max(std::fabs(got), std::fabs(want)))) {
        row.nonlinear.push_back(f.name);
        break;
      }
    }
  }
  // Launches are a count per step: the target's is the largest batch's when they agree.
  if (row.measured[n - 1].launches == row.measured[n - 2].launches) row.target.launches = row.measured[n - 1].launches;
}

void bound_at_target(Row& row) {
  const Counters& t = row.target;
  const double launches = std::max(1.0, std::round(t.launches));
  h200::Occupancy occ;
  uint64_t blocks = 0;
  int warps = 0;
  if (row.kind == "kernel") {
    occ = h200::occupancy(row.threads, std::max(0, row.registers), row.shared_bytes);
    warps = (row.threads + 31) / 32;
    blocks = uint64_t(std::llround(t.blocks / launches));
  }
  const h200::Bound b = h200::bound(t.dram_bytes, t.flops, h200::peak_flops(row.math), uint64_t(launches), blocks, occ,
                                    warps);
  row.occupancy = occ.occupancy;
  row.waves = b.waves;
  row.memory_us = b.memory_us;
  row.compute_us = b.compute_us;
  row.launch_us = b.launch_us;
  row.bound_us = b.bound_us;
  row.limiter = b.limiter;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

double Row::sector_efficiency() const {
  const double actual = target.gld_sec + target.gst_sec;
  return actual > 0 ? (target.gld_ideal + target.gst_ideal) / actual : 1.0;
}

double Row::conflicts_per_request() const {
  const double req = target.shld_req + target.shst_req;
  return req > 0 ? target.sh_conf / req : 0.0;
}

std::string short_name(const std::string& name) {
  // Drop every namespace or class qualifier ("rt::cuda::", "{anonymous}::", and the
  // demangler's "(anonymous namespace)::").
  std::string kernel = name;
  for (size_t k; (k = kernel.find("(anonymous namespace)::")) != std::string::npos;) kernel.erase(k, 23);
  std::string out;
  size_t word = 0;  // where the current qualified name began in `out`
  for (size_t i = 0; i < kernel.size(); ++i) {
    const char c = kernel[i];
    if (c == ':' && i + 1 < kernel.size() && kernel[i + 1] == ':') {
      out.resize(word);
      ++i;
      continue;
    }
    out += c;
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '{' || c == '}')) word = out.size();
  }
  return out;
}

Lab load(const std::vector<std::pair<int, std::string>>& files, int target) {
  std::vector<std::pair<int, json::Value>> docs;
  for (const auto& [batch, path] : files) {
    std::ifstream in(path);
    RT_CHECK(in, "kernel lab: cannot read '", path, "' (the RINGTAPE_EMU_PERF file of the batch-", batch, " run)");
    std::stringstream ss;
    ss << in.rdbuf();
    try {
      docs.emplace_back(batch, json::parse(ss.str()));
    } catch (const Error& e) {
      RT_CHECK(false, "kernel lab: '", path, "' is not JSON: ", e.what());
    }
    const json::Value* fmt_v = docs.back().second.find("format");
    RT_CHECK(fmt_v && fmt_v->is_string() && fmt_v->as_string() == "ringtape kernel lab 1", "kernel lab: '", path,
             "' is not a kernel lab file (no \"format\": \"ringtape kernel lab 1\"; written by a process run with "
             "RINGTAPE_EMU_PERF under --config=cuda-emu)");
  }
  return build(docs, target);
}

Lab build(const std::vector<std::pair<int, json::Value>>& docs, int target) {
  Lab lab;
  lab.target = target;
  for (const auto& [b, doc] : docs) lab.batches.push_back(b);
  std::sort(lab.batches.begin(), lab.batches.end());
  RT_CHECK(lab.batches.size() >= 2, "kernel lab: the extrapolation needs the step at two batches at least, got ",
           lab.batches.size());
  RT_CHECK(std::adjacent_find(lab.batches.begin(), lab.batches.end()) == lab.batches.end(),
           "kernel lab: a batch is given twice");
  RT_CHECK(lab.batches.front() >= 1 && target >= 1, "kernel lab: batches must be positive");
  const size_t n = lab.batches.size();

  std::map<std::string, Building> rows;
  std::map<std::string, std::vector<bool>> present;
  for (const auto& [batch, doc] : docs) {
    const size_t bi = size_t(std::find(lab.batches.begin(), lab.batches.end(), batch) - lab.batches.begin());
    const json::Value* recs = doc.find("records");
    RT_CHECK(recs && recs->is_array(), "kernel lab: the batch-", batch, " file has no \"records\" array");
    for (const json::Value& r : recs->as_array()) {
      const std::string key = row_key(r);
      Building& bld = rows[key];
      Row& row = bld.row;
      if (row.measured.empty()) {
        row.measured.resize(n);
        row.kind = str(r, "kind");
        row.kernel = row.kind == "kernel" || row.kind == "library" ? str(r, "kernel") : row.kind;
        row.site = str(r, "site");
        present[key].assign(n, false);
      }
      present[key][bi] = true;
      const Counters c = counters_of(r);
      add(row.measured[bi], c);
      if (c.launches > bld.most_launches) {
        bld.most_launches = c.launches;
        row.math = str(r, "math");
        row.threads = int(product3(r, "block"));
        const json::Value* regs = r.find("registers_per_thread");
        row.registers = regs && regs->is_int() ? int(regs->as_int()) : -1;
        row.shared_bytes = int64_t(num(r, "static_shared_bytes") + num(r, "dynamic_shared_bytes"));
      }
    }
  }
  for (auto& [key, bld] : rows) {
    Row& row = bld.row;
    if (std::find(present[key].begin(), present[key].end(), false) != present[key].end())
      row.nonlinear.push_back("not at every batch");
    extrapolate(row, lab.batches, target);
    bound_at_target(row);
    lab.rows.push_back(std::move(row));
  }
  std::sort(lab.rows.begin(), lab.rows.end(), [](const Row& a, const Row& b) { return a.bound_us > b.bound_us; });

  Summary& s = lab.summary;
  for (const auto& [batch, doc] : docs)
    if (batch == lab.batches.back()) {
      const json::Value* h = doc.find("host_launches");
      const json::Value* g = doc.find("graph_launches");
      if (h && h->is_number()) s.host_launches = h->as_double();
      if (g && g->is_number()) s.graph_launches = g->as_double();
    }
  for (const Row& r : lab.rows) {
    if (r.kind == "kernel") s.kernel_us += r.bound_us, s.kernel_launches += r.target.launches, s.kernel_bytes += r.target.dram_bytes;
    else if (r.kind == "library") s.library_us += r.bound_us, s.library_calls += r.target.launches;
    else s.copy_us += r.bound_us, s.copies += r.target.launches;
  }
  s.total_us = s.kernel_us + s.library_us + s.copy_us;
  s.launches = s.kernel_launches + s.library_calls + s.copies;
  s.images_per_s = s.total_us > 0 ? double(target) / (s.total_us * 1e-6) : 0.0;
  return lab;
}

std::string table(const Lab& lab, int top) {
  std::ostringstream o;
  const Summary& s = lab.summary;
  std::string batches;
  for (int b : lab.batches) batches += (batches.empty() ? "" : ", ") + std::to_string(b);
  o << "kernel lab: one training step on an H200 (modelled), measured at batches " << batches
    << " and extrapolated to " << lab.target << " (docs/kernel-lab.md)\n";
  char line[512];
  std::snprintf(line, sizeof line, "%3s  %-58s %6s %9s %6s %7s %5s %10s %6s  %s\n", "#", "kernel (launch site)", "calls",
                "MB", "sect%", "confl/r", "occ%", "bound us", "step%", "limiter");
  o << line;
  int shown = 0;
  for (const Row& r : lab.rows) {
    if (top > 0 && shown >= top) break;
    ++shown;
    std::string name = r.kind == "kernel" ? short_name(r.kernel) : r.kernel;
    // A kernel's file:line; a library call's API is in the JSON (its name says the library).
    std::string site = r.kind == "kernel" ? r.site.substr(r.site.rfind('/') + 1) : "";
    std::string label = name + (site.empty() ? "" : " (" + site + ")");
    if (label.size() > 58) label = name.substr(0, std::max<int>(10, 57 - int(site.size()) - 3)) + "~ (" + site + ")";
    if (label.size() > 58) label = label.substr(0, 57) + "~";
    const bool k = r.kind == "kernel";
    std::snprintf(line, sizeof line, "%3d  %-58s %6.0f %9.1f %6s %7s %5s %10.1f %6.2f  %s%s\n", shown, label.c_str(),
                  r.target.launches, r.target.dram_bytes / 1e6,
                  k ? fmt("%.0f", 100 * r.sector_efficiency()).c_str() : "-",
                  k ? fmt("%.2f", r.conflicts_per_request()).c_str() : "-",
                  k ? fmt("%.0f", 100 * r.occupancy).c_str() : "-", r.bound_us,
                  s.total_us > 0 ? 100 * r.bound_us / s.total_us : 0.0, r.limiter.c_str(),
                  r.nonlinear.empty() ? "" : " *");
    o << line;
  }
  if (top > 0 && int(lab.rows.size()) > top) o << "     ... " << lab.rows.size() - size_t(top) << " more rows in the JSON\n";
  std::vector<const Row*> off;
  for (const Row& r : lab.rows)
    if (!r.nonlinear.empty()) off.push_back(&r);
  if (!off.empty()) {
    o << "* not linear in the batch (Note [Extrapolating the lab]; the line through the two largest batches is used):\n";
    for (const Row* r : off) {
      std::string what;
      for (const std::string& f : r->nonlinear) what += (what.empty() ? "" : ", ") + f;
      o << "    " << (r->kind == "kernel" ? short_name(r->kernel) : r->kernel) << " (" << r->site << "): " << what << "\n";
    }
  }
  std::snprintf(line, sizeof line,
                "step bound at batch %d: %.3f ms = hand-written kernels %.3f ms (%.0f launches) + library calls %.3f ms "
                "(%.0f calls) + copies/memsets %.3f ms (%.0f)\n",
                lab.target, s.total_us / 1e3, s.kernel_us / 1e3, s.kernel_launches, s.library_us / 1e3, s.library_calls,
                s.copy_us / 1e3, s.copies);
  o << line;
  std::snprintf(line, sizeof line,
                "launches per step: %.0f; hand-written kernels move %.1f MB per image; images/s at the bound: %.0f\n",
                s.launches, s.kernel_bytes / double(lab.target) / 1e6, s.images_per_s);
  o << line;
  if (s.host_launches >= 0) {
    std::snprintf(line, sizeof line, "host launches per step: %.0f (%.0f of them CUDA graph launches)\n",
                  s.host_launches, std::max(0.0, s.graph_launches));
    o << line;
  }
  return o.str();
}

json::Value to_json(const Lab& lab) {
  json::Value j = json::Value::object();
  json::Value bs = json::Value::array();
  for (int b : lab.batches) bs.push_back(b);
  j.set("format", "ringtape kernel lab report 1");
  j.set("device", "NVIDIA H200 (modelled, cuda_emu/h200.h)");
  j.set("measured_batches", std::move(bs));
  j.set("target_batch", lab.target);
  const Summary& s = lab.summary;
  json::Value sj = json::Value::object();
  sj.set("bound_us", s.total_us);
  sj.set("kernel_bound_us", s.kernel_us);
  sj.set("library_bound_us", s.library_us);
  sj.set("copy_bound_us", s.copy_us);
  sj.set("kernel_launches", s.kernel_launches);
  sj.set("library_calls", s.library_calls);
  sj.set("copies", s.copies);
  sj.set("launches", s.launches);
  if (s.host_launches >= 0) sj.set("host_launches", s.host_launches), sj.set("graph_launches", s.graph_launches);
  sj.set("kernel_dram_bytes", s.kernel_bytes);
  sj.set("kernel_dram_bytes_per_image", s.kernel_bytes / double(lab.target));
  sj.set("images_per_s", s.images_per_s);
  j.set("summary", std::move(sj));
  json::Value rows = json::Value::array();
  for (const Row& r : lab.rows) {
    json::Value o = json::Value::object();
    o.set("kind", r.kind);
    o.set("kernel", r.kernel);
    o.set("site", r.site);
    o.set("math", r.math);
    if (r.kind == "kernel") {
      o.set("threads_per_block", r.threads);
      o.set("registers_per_thread", r.registers >= 0 ? json::Value(r.registers) : json::Value());
      o.set("shared_bytes", r.shared_bytes);
      o.set("occupancy", r.occupancy);
      o.set("waves", r.waves);
      o.set("sector_efficiency", r.sector_efficiency());
      o.set("load_sector_efficiency", r.target.gld_sec > 0 ? r.target.gld_ideal / r.target.gld_sec : 1.0);
      o.set("store_sector_efficiency", r.target.gst_sec > 0 ? r.target.gst_ideal / r.target.gst_sec : 1.0);
      o.set("bank_conflicts_per_request", r.conflicts_per_request());
      // At most 32: lanes and instructions are extrapolated apart, and a warp's lanes stop
      // growing with the batch at 32 (a row of one partly filled warp at small batches).
      o.set("active_lanes_per_instruction",
            r.target.instructions > 0 ? std::min(32.0, r.target.lanes / r.target.instructions) : 0.0);
    }
    auto counters = [](const Counters& c) {
      json::Value v = json::Value::object();
      for (const Field& f : kFields) v.set(f.name, c.*f.member);
      return v;
    };
    o.set("at_target", counters(r.target));
    json::Value m = json::Value::array();
    for (const Counters& c : r.measured) m.push_back(counters(c));
    o.set("measured", std::move(m));
    json::Value nl = json::Value::array();
    for (const std::string& f : r.nonlinear) nl.push_back(f);
    o.set("not_linear", std::move(nl));
    o.set("memory_us", r.memory_us);
    o.set("compute_us", r.compute_us);
    o.set("launch_us", r.launch_us);
    o.set("bound_us", r.bound_us);
    o.set("limiter", r.limiter);
    rows.push_back(std::move(o));
  }
  j.set("rows", std::move(rows));
  return j;
}

std::string roofline_svg(const Lab& lab, const std::string& title) {
  // Log-log axes: x FLOPs per DRAM byte, y FLOP/s.
  const double x0 = 1e-3, x1 = 1e4, y0 = 1e9, y1 = 2e15;
  const double W = 1160, H = 640, L = 80, R = 450, T = 50, B = 60;
  auto px = [&](double x) { return L + (std::log10(x) - std::log10(x0)) / (std::log10(x1) - std::log10(x0)) * (W - L - R); };
  auto py = [&](double y) { return H - B - (std::log10(y) - std::log10(y0)) / (std::log10(y1) - std::log10(y0)) * (H - T - B); };
  std::ostringstream o;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                W, H);
  o << buf;
  std::string esc;
  for (const char c : title) esc += c == '<' ? std::string("&lt;") : c == '&' ? std::string("&amp;") : std::string(1, c);
  std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"25\" font-size=\"14\">%s</text>\n", L, esc.c_str());
  o << buf;
  // Grid and axes.
  for (double x = x0; x <= x1 * 1.001; x *= 10) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "text-anchor=\"middle\">%g</text>\n",
                  px(x), py(y0), px(x), py(y1), px(x), H - B + 16, x);
    o << buf;
  }
  for (double y = y0; y <= y1; y *= 10) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "text-anchor=\"end\">%g</text>\n",
                  px(x0), py(y), px(x1), py(y), L - 6, py(y) + 4, y);
    o << buf;
  }
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">FLOPs per DRAM byte (lower bound of bytes)</text>\n"
                "<text transform=\"translate(18,%.0f) rotate(-90)\" text-anchor=\"middle\">FLOP/s at the bound "
                "(launch cost included)</text>\n",
                (L + W - R) / 2, H - 20, (T + H - B) / 2);
  o << buf;
  // Roofs: memory, then each compute peak where it meets it.
  struct Roof {
    const char* name;
    double peak;
    const char* color;
  };
  const Roof roofs[] = {{"FP32 66.9 TFLOP/s", h200::kFlopsF32, "#1f77b4"},
                        {"TF32 tensor 494.7 TFLOP/s", h200::kFlopsTf32Tensor, "#9467bd"},
                        {"BF16 tensor 989.4 TFLOP/s", h200::kFlopsBf16Tensor, "#d62728"}};
  const double bw = h200::kDramBytesPerS;
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\" stroke-width=\"2\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" transform=\"rotate(-33 %.1f %.1f)\">HBM3e 4.8 TB/s</text>\n",
                px(x0), py(bw * x0), px(h200::kFlopsBf16Tensor / bw), py(h200::kFlopsBf16Tensor), px(2e-2),
                py(bw * 2e-2) - 6, px(2e-2), py(bw * 2e-2) - 6);
  o << buf;
  for (const Roof& r : roofs) {
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n",
                  px(r.peak / bw), py(r.peak), px(x1), py(r.peak), r.color, px(x1) - 150, py(r.peak) - 5, r.color, r.name);
    o << buf;
  }
  // The rows: hand-written kernels blue circles, library calls red squares; the 12 largest
  // numbered, with a legend at the right.
  int label = 0, no_flops = 0;
  std::ostringstream legend;
  std::map<std::pair<int, int>, int> on_spot;
  for (const Row& r : lab.rows) {
    if (r.target.flops <= 0 || r.target.dram_bytes <= 0 || r.bound_us <= 0) {
      no_flops += r.kind == "kernel";
      continue;
    }
    const double x = std::clamp(r.target.flops / r.target.dram_bytes, x0, x1);
    const double y = std::clamp(r.target.flops / (r.bound_us * 1e-6), y0, y1);
    const bool lib = r.kind == "library";
    if (lib)
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"#d62728\" fill-opacity=\"0.6\"/>\n",
                    px(x) - 3.5, py(y) - 3.5);
    else
      std::snprintf(buf, sizeof buf, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#1f77b4\" fill-opacity=\"0.6\"/>\n",
                    px(x), py(y));
    o << buf;
    if (label < 12) {
      ++label;
      // Points on one spot (a convolution's three directions) get their numbers side by side.
      const int beside = on_spot[{int(px(x)), int(py(y))}]++;
      std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\">%d</text>\n", px(x) + 5 + 14 * beside, py(y) - 5,
                    label);
      o << buf;
      std::string name = lib ? r.kernel : short_name(r.kernel);
      if (name.size() > 64) name = name.substr(0, 63) + "~";
      std::string e;
      for (const char c : name)
        e += c == '<' ? std::string("&lt;") : c == '>' ? std::string("&gt;") : c == '&' ? std::string("&amp;") : std::string(1, c);
      std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.0f\">%d %s</text>\n", W - R + 10, T + 14.0 * label, label,
                    e.c_str());
      legend << buf;
    }
  }
  o << legend.str();
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.0f\" y=\"%.0f\">circles: hand-written kernels; squares: library calls</text>\n"
                "<text x=\"%.0f\" y=\"%.0f\">%d hand-written kernels with no FLOP count are not drawn</text>\n",
                W - R + 10, T + 14.0 * 14, W - R + 10, T + 14.0 * 15, no_flops);
  o << buf << "</svg>\n";
  return o.str();
}

}  // namespace rt::prof::lab
