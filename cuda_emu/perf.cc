// The kernel lab's recorder: per kernel instantiation and launch configuration, the memory
// behaviour Nsight Compute would report, counted from the accesses the emulator already
// sees, and a model of the launch on an H200 (cuda_emu/h200.h). docs/kernel-lab.md defines
// every field and says what the lab cannot know.
//
// Note [Kernel lab]
// RINGTAPE_EMU_PERF=FILE (a "%p" in it becomes the process id) turns the recorder on. Every
// kernel launch, library call (cuBLAS, cuDNN), device-to-device copy and memset queued
// while it records (perf_recording: always, or inside perf_window) is counted when it runs,
// and at exit FILE gets one JSON record per (kind, name, launch site, grid, block, dynamic
// shared memory), aggregated over its launches (perf_write). Kernels: their global and
// shared accesses grouped into warp-level requests (Note [Warp-level requests]) give the
// sectors, wavefronts and lanes; the distinct bytes they touch give dram_bytes_lower_bound;
// the launcher's hint (rt::cuda::flops_hint) gives flops; ptxas's report (cuda_emu/ptxas.h)
// gives registers, static shared memory and spills; h200.h turns these into occupancy,
// waves, the roofline bound and its limiter. Library calls: the FLOPs and minimal bytes
// their shape implies (emu.h's LibraryCost), bounded by the tensor-core peak of their math.
// The .cu files are compiled for this mode so that a GPU thread's accesses stay as written
// (no vectorisation, no merged stores: tools/copts.bzl), so that requests are as nvcc
// issues them, one per source access.
//
// Note [Graph launches in the lab]
// A node of a CUDA graph runs as its own operation at every launch of the graph
// (Note [Graph replay] in cuda_emu/graph.cc), so its kernel, library call, copy or memset is
// counted in its record like eager work: `launches` counts the times the work ran on the
// device, and `graph_node_launches` how many of those came from graph launches. What the
// host issued is another count: one cudaGraphLaunch is a single host launch however many
// nodes it runs. The file's `graph_launches` counts those, and `host_launches` is the work
// the host queued itself (every record's launches less its graph node launches) plus the
// graph launches. The roofline bound of a record still charges the H200's launch cost to
// each of its launches, graph nodes included.
//
// Note [Warp-level requests]
// A GPU issues a memory instruction once for the active lanes of a warp; the emulator runs
// the lanes one after another. Each GPU thread logs its accesses (address, bytes, the
// instrumented call's return address as the instruction, read/write/atomic, global/shared);
// when the block's threads pass a barrier (no instruction spans a __syncthreads) and when
// the block ends, each warp's logs are grouped: the k-th execution of instruction P by each
// lane of the warp is one request, with those lanes active. So a grid-stride loop's
// iteration k is one request, a branch taken by 16 lanes is a request with 16 active lanes,
// and a loop some lanes run once more gives a last request with fewer lanes, as on a GPU.
// Not seen: a request that nvcc would split or merge differently (a g++ address computation
// hoisted out of a loop does not change the accesses; a load g++ keeps in a register where
// nvcc reloads it, or the reverse, does).
#include "cuda_emu/perf.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_emu/executor.h"
#include "cuda_emu/h200.h"
#include "cuda_emu/ptxas.h"

namespace rt::emu {

// ---- the counters of a set of requests ---------------------------------------------------------
namespace {

struct Counters {
  uint64_t gld_req = 0, gld_sec = 0, gld_ideal = 0, gld_bytes = 0;
  uint64_t gst_req = 0, gst_sec = 0, gst_ideal = 0, gst_bytes = 0;
  uint64_t shld_req = 0, shst_req = 0, sh_wave = 0, sh_conf = 0;
  uint64_t atomics = 0, instructions = 0, lanes = 0;
  void add(const Counters& o) {
    gld_req += o.gld_req, gld_sec += o.gld_sec, gld_ideal += o.gld_ideal, gld_bytes += o.gld_bytes;
    gst_req += o.gst_req, gst_sec += o.gst_sec, gst_ideal += o.gst_ideal, gst_bytes += o.gst_bytes;
    shld_req += o.shld_req, shst_req += o.shst_req, sh_wave += o.sh_wave, sh_conf += o.sh_conf;
    atomics += o.atomics, instructions += o.instructions, lanes += o.lanes;
  }
};

constexpr uint8_t kWrite = 1, kAtomic = 2, kShared = 4;

// One access of one GPU thread, in its program order.
struct Access {
  uintptr_t addr;
  const void* pc;
  uint32_t bytes;
  uint8_t flags;
};

// Bytes touched by a launch: one bit per byte, per 4 KiB page, read and written apart.
struct Page {
  std::atomic<uint64_t> read[64] = {}, written[64] = {};
};

void mark_bits(std::atomic<uint64_t>* words, uintptr_t off, size_t n) {
  while (n > 0) {
    const size_t bit = off & 63, take = std::min<size_t>(n, 64 - bit);
    const uint64_t mask = take == 64 ? ~uint64_t(0) : ((uint64_t(1) << take) - 1) << bit;
    words[off >> 6].fetch_or(mask, std::memory_order_relaxed);
    off += take;
    n -= take;
  }
}

}  // namespace

struct LaunchPerf {
  std::mutex mu;
  Counters counters;
  std::mutex pages_mu;
  std::unordered_map<uintptr_t, std::unique_ptr<Page>> pages;  // by address >> 12

  Page* page(uintptr_t index) {
    std::lock_guard<std::mutex> g(pages_mu);
    auto& p = pages[index];
    if (!p) p = std::make_unique<Page>();
    return p.get();
  }
  // Marks [a, a + n) read and/or written.
  void touch(uintptr_t a, size_t n, bool read, bool write, uintptr_t* cached_index, Page** cached) {
    while (n > 0) {
      const uintptr_t index = a >> 12, off = a & 4095;
      const size_t take = std::min<size_t>(n, 4096 - off);
      if (index != *cached_index || !*cached) *cached = page(index), *cached_index = index;
      if (read) mark_bits((*cached)->read, off, take);
      if (write) mark_bits((*cached)->written, off, take);
      a += take;
      n -= take;
    }
  }
  uint64_t distinct_bytes() const {
    uint64_t n = 0;
    for (const auto& [index, p] : pages)
      for (int i = 0; i < 64; ++i)
        n += uint64_t(__builtin_popcountll(p->read[i].load(std::memory_order_relaxed))) +
             uint64_t(__builtin_popcountll(p->written[i].load(std::memory_order_relaxed)));
    return n;
  }
};

// The logs of the block a host thread runs (reused from block to block).
struct BlockPerf {
  LaunchPerf* launch = nullptr;
  std::vector<std::vector<Access>> logs;  // [threads of the block]
  Counters counters;
  // Scratch of the grouping.
  struct Item {
    const void* pc;
    uint32_t occurrence;
    uint8_t flags;
    uint8_t lane;
    uint32_t bytes;
    uintptr_t addr;
  };
  std::vector<Item> items;
  std::vector<uint64_t> keys;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;
  // Occurrences of each instruction in one lane's log: open addressing, cleared by stamp.
  struct Slot {
    const void* pc = nullptr;
    uint32_t stamp = 0, count = 0;
  };
  std::vector<Slot> slots = std::vector<Slot>(1024);
  uint32_t stamp = 0;
  size_t used = 0;

  uint32_t next_occurrence(const void* pc) {
    if (2 * (used + 1) > slots.size()) grow();
    size_t i = (reinterpret_cast<uintptr_t>(pc) * 0x9E3779B97F4A7C15ull >> 40) & (slots.size() - 1);
    for (;; i = (i + 1) & (slots.size() - 1)) {
      Slot& s = slots[i];
      if (s.stamp != stamp) {
        s = Slot{pc, stamp, 1};
        ++used;
        return 0;
      }
      if (s.pc == pc) return s.count++;
    }
  }
  void new_lane() {
    ++stamp;
    used = 0;
    if (stamp == 0) {  // wrapped: old slots could match again
      std::fill(slots.begin(), slots.end(), Slot{});
      stamp = 1;
    }
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots);
    slots.assign(old.size() * 2, Slot{});
    used = 0;
    for (const Slot& s : old)
      if (s.stamp == stamp) {
        size_t i = (reinterpret_cast<uintptr_t>(s.pc) * 0x9E3779B97F4A7C15ull >> 40) & (slots.size() - 1);
        while (slots[i].stamp == stamp) i = (i + 1) & (slots.size() - 1);
        slots[i] = s;
        ++used;
      }
  }
};

namespace {

thread_local BlockPerf tls_block_perf;

// ---- one warp-level request (Note [Warp-level requests]) -----------------------------------------
using Item = BlockPerf::Item;

// Global memory: sectors are the distinct 32-byte sectors the active lanes touch; the ideal,
// the fewest sectors their distinct bytes could fill.
void global_request(BlockPerf& p, const Item* first, const Item* last, uintptr_t* page_index, Page** page) {
  const uint8_t f = first->flags;
  p.keys.clear();
  p.spans.clear();
  uint64_t bytes = 0;
  for (const Item* it = first; it != last; ++it) {
    for (uintptr_t s = it->addr >> 5; s <= (it->addr + it->bytes - 1) >> 5; ++s) p.keys.push_back(s);
    p.spans.emplace_back(it->addr, it->addr + it->bytes);
    bytes += it->bytes;
    const bool atomic = f & kAtomic, write = f & kWrite;
    p.launch->touch(it->addr, it->bytes, atomic || !write, atomic || write, page_index, page);
  }
  std::sort(p.keys.begin(), p.keys.end());
  const uint64_t sectors = uint64_t(std::unique(p.keys.begin(), p.keys.end()) - p.keys.begin());
  std::sort(p.spans.begin(), p.spans.end());
  uint64_t distinct = 0;
  uintptr_t lo = p.spans[0].first, hi = p.spans[0].second;
  for (const auto& [a, b] : p.spans) {
    if (a > hi) {
      distinct += hi - lo;
      lo = a, hi = b;
    } else {
      hi = std::max(hi, b);
    }
  }
  distinct += hi - lo;
  const uint64_t ideal = (distinct + 31) / 32;
  Counters& c = p.counters;
  if (f & kAtomic) ++c.atomics;
  else if (f & kWrite) ++c.gst_req, c.gst_sec += sectors, c.gst_ideal += ideal, c.gst_bytes += bytes;
  else ++c.gld_req, c.gld_sec += sectors, c.gld_ideal += ideal, c.gld_bytes += bytes;
}

// Shared memory: 32 banks of 4 bytes. A request is served in phases (all 32 lanes for
// accesses of up to 4 bytes, half-warps for 8 bytes, quarter-warps for 16); a phase takes as
// many wavefronts as the most distinct 4-byte words any one bank must deliver (lanes reading
// the same word share it: a broadcast). Conflicts are the wavefronts beyond one per phase.
void shared_request(BlockPerf& p, const Item* first, const Item* last) {
  Counters& c = p.counters;
  const uint8_t f = first->flags;
  if (f & kAtomic) {
    ++c.atomics;
    return;
  }
  uint32_t widest = 0;
  for (const Item* it = first; it != last; ++it) widest = std::max(widest, it->bytes);
  const uint32_t lanes_per_phase = widest <= 4 ? 32 : widest <= 8 ? 16 : 8;
  p.keys.clear();  // phase << 56 | bank << 48 | word
  for (const Item* it = first; it != last; ++it) {
    const uint64_t phase = it->lane / lanes_per_phase;
    for (uintptr_t w = it->addr >> 2; w <= (it->addr + it->bytes - 1) >> 2; ++w)
      p.keys.push_back(phase << 56 | uint64_t(w & 31) << 48 | (uint64_t(w) & ((uint64_t(1) << 48) - 1)));
  }
  std::sort(p.keys.begin(), p.keys.end());
  p.keys.erase(std::unique(p.keys.begin(), p.keys.end()), p.keys.end());
  uint64_t wavefronts = 0, phases = 0;
  for (size_t i = 0; i < p.keys.size();) {
    const uint64_t phase = p.keys[i] >> 56;
    uint64_t most = 0;
    while (i < p.keys.size() && (p.keys[i] >> 56) == phase) {
      const uint64_t bank = p.keys[i] >> 48;
      uint64_t words = 0;
      for (; i < p.keys.size() && (p.keys[i] >> 48) == bank; ++i) ++words;
      most = std::max(most, words);
    }
    wavefronts += most;
    ++phases;
  }
  if (f & kWrite) ++c.shst_req;
  else ++c.shld_req;
  c.sh_wave += wavefronts;
  c.sh_conf += wavefronts - phases;
}

// The logs of one epoch of the block become requests, warp by warp.
void group_requests(BlockCtx& b) {
  BlockPerf& p = *b.perf;
  uintptr_t page_index = ~uintptr_t(0);
  Page* page = nullptr;
  for (uint32_t warp = 0; warp * 32 < b.nthreads; ++warp) {
    p.items.clear();
    for (uint32_t lane = 0; lane < 32 && warp * 32 + lane < b.nthreads; ++lane) {
      std::vector<Access>& log = p.logs[warp * 32 + lane];
      p.new_lane();
      for (const Access& a : log)
        p.items.push_back(Item{a.pc, p.next_occurrence(a.pc), a.flags, uint8_t(lane), a.bytes, a.addr});
      log.clear();
    }
    std::sort(p.items.begin(), p.items.end(), [](const Item& x, const Item& y) {
      if (x.pc != y.pc) return x.pc < y.pc;
      if (x.occurrence != y.occurrence) return x.occurrence < y.occurrence;
      if (x.flags != y.flags) return x.flags < y.flags;
      return x.lane < y.lane;
    });
    for (size_t i = 0; i < p.items.size();) {
      size_t j = i + 1;
      while (j < p.items.size() && p.items[j].pc == p.items[i].pc && p.items[j].occurrence == p.items[i].occurrence &&
             p.items[j].flags == p.items[i].flags)
        ++j;
      ++p.counters.instructions;
      p.counters.lanes += j - i;
      if (p.items[i].flags & kShared) shared_request(p, &p.items[i], &p.items[j]);
      else global_request(p, &p.items[i], &p.items[j], &page_index, &page);
      i = j;
    }
  }
}

// ---- the process's records ---------------------------------------------------------------------
struct Record {
  std::string kind, name, written, site, shape, math;
  const void* entry = nullptr;  // a kernel named by its symbol when written (simt.h, instance_name)
  dim3 grid{0, 0, 0}, block{0, 0, 0};
  size_t dynamic_smem = 0;
  uint64_t launches = 0, dram_bytes = 0;
  uint64_t graph_node_launches = 0;  // of `launches` (Note [Graph launches in the lab])
  double flops = 0;
  Counters c;
};

struct State {
  bool enabled = false;
  std::string path;
  std::atomic<int> window{0};  // 0: no window (everything), 1: window closed, 2: open
  std::mutex mu;
  std::map<std::string, Record> records;
  uint64_t graph_launches = 0;  // under mu
};

void write_at_exit();

State& state() {
  static State* s = [] {
    auto* st = new State;  // leaked: stream workers may still record while the process exits
    const char* v = std::getenv("RINGTAPE_EMU_PERF");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // The sanitizer's runtime receives the kernels' accesses (Note [Instrumented kernels]):
    // the lab would see none, and records of zeros would mislead.
    if (v && *v)
      std::fprintf(stderr, "cuda-emu: RINGTAPE_EMU_PERF is ignored under --config=cuda-emu-asan/-tsan: the kernel "
                           "lab counts under --config=cuda-emu\n");
    v = nullptr;
#endif
    if (v && *v) {
      st->enabled = true;
      st->path = v;
      for (size_t k; (k = st->path.find("%p")) != std::string::npos;)
        st->path.replace(k, 2, std::to_string(getpid()));
      std::atexit(write_at_exit);
    }
    return st;
  }();
  return *s;
}

// The launch configuration in a key and a record.
std::string dims3(dim3 d) { return std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z); }

Record& record_for(State& s, const std::string& kind, const std::string& name, const std::string& site, dim3 grid,
                   dim3 block, size_t smem, const std::string& shape) {
  const std::string key = kind + "|" + name + "|" + site + "|" + dims3(grid) + "|" + dims3(block) + "|" +
                          std::to_string(smem) + "|" + shape;
  auto [it, fresh] = s.records.try_emplace(key);
  Record& r = it->second;
  if (fresh) {
    r.kind = kind, r.name = name, r.site = site, r.grid = grid, r.block = block, r.dynamic_smem = smem, r.shape = shape;
  }
  return r;
}

// ---- JSON ----------------------------------------------------------------------------------------
std::string quoted(const std::string& v) {
  std::string o = "\"";
  for (const char ch : v) {
    if (ch == '"' || ch == '\\') o += '\\', o += ch;
    else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      o += buf;
    } else o += ch;
  }
  return o + "\"";
}
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
std::string num(uint64_t v) { return std::to_string(v); }
std::string triple(dim3 d) { return "[" + dims3(d) + "]"; }
double ratio(uint64_t a, uint64_t b) { return b ? double(a) / double(b) : 0.0; }

std::string record_json(const Record& r) {
  const bool kernel = r.kind == "kernel";
  std::string o = "{\"kind\": " + quoted(r.kind) + ", \"kernel\": " + quoted(r.name);
  if (kernel) o += ", \"written\": " + quoted(r.written);
  o += ", \"site\": " + quoted(r.site) + ", \"launches\": " + num(r.launches) +
       ", \"graph_node_launches\": " + num(r.graph_node_launches);
  if (kernel)
    o += ", \"grid\": " + triple(r.grid) + ", \"block\": " + triple(r.block) +
         ", \"dynamic_shared_bytes\": " + num(uint64_t(r.dynamic_smem));
  if (!r.shape.empty()) o += ", \"shape\": " + quoted(r.shape);
  const Counters& c = r.c;
  o += ", \"global_load_requests\": " + num(c.gld_req) + ", \"global_load_sectors\": " + num(c.gld_sec) +
       ", \"global_load_sectors_ideal\": " + num(c.gld_ideal) + ", \"global_load_bytes\": " + num(c.gld_bytes) +
       ", \"global_store_requests\": " + num(c.gst_req) + ", \"global_store_sectors\": " + num(c.gst_sec) +
       ", \"global_store_sectors_ideal\": " + num(c.gst_ideal) + ", \"global_store_bytes\": " + num(c.gst_bytes) +
       ", \"shared_load_requests\": " + num(c.shld_req) + ", \"shared_store_requests\": " + num(c.shst_req) +
       ", \"shared_wavefronts\": " + num(c.sh_wave) + ", \"shared_bank_conflicts\": " + num(c.sh_conf) +
       ", \"active_lanes_per_instruction\": " + num(ratio(c.lanes, c.instructions)) +
       ", \"memory_instructions\": " + num(c.instructions) + ", \"atomics\": " + num(c.atomics) +
       ", \"dram_bytes_lower_bound\": " + num(r.dram_bytes) + ", \"flops\": " + num(r.flops) +
       ", \"math\": " + quoted(r.math);

  // The launch on an H200 (h200.h).
  const uint64_t launches = std::max<uint64_t>(1, r.launches);
  h200::Occupancy occ;
  uint64_t blocks = 0;
  int warps = 0;
  if (kernel) {
    const KernelResources* res = kernel_resources(r.name, r.site.substr(0, r.site.rfind(':')));
    const uint64_t threads = uint64_t(r.block.x) * r.block.y * r.block.z;
    warps = int((threads + 31) / 32);
    blocks = uint64_t(r.grid.x) * r.grid.y * r.grid.z;
    if (res) {
      o += ", \"registers_per_thread\": " + num(uint64_t(res->registers)) +
           ", \"static_shared_bytes\": " + num(uint64_t(res->static_shared_bytes)) +
           ", \"spill_bytes\": " + num(uint64_t(res->spill_store_bytes + res->spill_load_bytes)) +
           ", \"stack_frame_bytes\": " + num(uint64_t(res->stack_frame_bytes));
      occ = h200::occupancy(int(threads), res->registers, int64_t(res->static_shared_bytes + r.dynamic_smem));
    } else {
      // Unknown to ptxas's report (docs/kernel-lab.md): occupancy from threads and the
      // dynamic shared memory only.
      o += ", \"registers_per_thread\": null, \"static_shared_bytes\": null, \"spill_bytes\": null";
      occ = h200::occupancy(int(threads), 0, int64_t(r.dynamic_smem));
    }
    o += ", \"occupancy\": " + num(occ.occupancy) + ", \"occupancy_limited_by\": " + quoted(occ.limited_by);
  }
  const h200::Bound b =
      h200::bound(double(r.dram_bytes), r.flops, h200::peak_flops(r.math), launches, blocks, occ, warps);
  if (kernel) o += ", \"waves\": " + num(b.waves);
  o += ", \"memory_us\": " + num(b.memory_us) + ", \"compute_us\": " + num(b.compute_us) +
       ", \"launch_us\": " + num(b.launch_us) + ", \"bound_us\": " + num(b.bound_us) +
       ", \"limiter\": " + quoted(b.limiter) + "}";
  return o;
}

// "void rt::cuda::k<float>(long, float const*)" -> "rt::cuda::k<float>": the demangled
// symbol of a kernel without its return type and parameters.
std::string instance_from_symbol(std::string f) {
  if (!f.empty() && f.back() == ')') {
    int depth = 0;
    for (size_t i = f.size(); i-- > 0;) {
      depth += f[i] == ')' ? 1 : f[i] == '(' ? -1 : 0;
      if (depth == 0) {
        f.resize(i);
        break;
      }
    }
  }
  if (f.rfind("void ", 0) == 0) f.erase(0, 5);
  return f;
}

bool write_records(State& s) {
  std::vector<const Record*> rs;
  std::lock_guard<std::mutex> g(s.mu);
  uint64_t host_launches = s.graph_launches;  // Note [Graph launches in the lab]
  for (auto& [key, r] : s.records) {
    host_launches += r.launches - r.graph_node_launches;
    if (r.entry) {  // named by its symbol (once: the key keeps the entry)
      const std::string f = function_name(r.entry);
      r.name = f.empty() ? r.written : instance_from_symbol(f);
      r.entry = nullptr;
    }
    rs.push_back(&r);
  }
  std::string out = "{\"format\": \"ringtape kernel lab 1\", \"device\": \"NVIDIA H200 (modelled, cuda_emu/h200.h)\"";
  out += ", \"dram_bytes_per_s\": " + num(h200::kDramBytesPerS) + ", \"launch_us\": " + num(h200::kLaunchUs) +
         ", \"sms\": " + num(uint64_t(h200::kSMs)) + ", \"graph_launches\": " + num(s.graph_launches) +
         ", \"host_launches\": " + num(host_launches) + ", \"records\": [";
  for (size_t i = 0; i < rs.size(); ++i) out += (i ? ",\n  " : "\n  ") + record_json(*rs[i]);
  out += "\n]}\n";
  const std::string tmp = s.path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0 ||
      std::rename(tmp.c_str(), s.path.c_str()) != 0) {
    std::fprintf(stderr, "cuda-emu: RINGTAPE_EMU_PERF: cannot write '%s': %s\n", s.path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

void write_at_exit() { write_records(state()); }

}  // namespace

// ---- the executor's and the checker's calls (perf.h) ------------------------------------------------
bool perf_enabled() { return state().enabled; }

std::shared_ptr<LaunchPerf> perf_new_launch() { return std::make_shared<LaunchPerf>(); }

bool perf_recording() {
  State& s = state();
  return s.enabled && s.window.load(std::memory_order_relaxed) != 1;
}

void perf_block_begin(BlockCtx& b) {
  BlockPerf& p = tls_block_perf;
  p.launch = b.op->launch_perf.get();
  p.counters = Counters{};
  if (p.logs.size() < b.nthreads) p.logs.resize(b.nthreads);
  for (uint32_t t = 0; t < b.nthreads; ++t) p.logs[t].clear();
  b.perf = &p;
}

void perf_access(ThreadCtx& t, uintptr_t a, size_t n, bool write, bool atomic, const void* pc) {
  BlockCtx& b = *t.block;
  uint8_t flags = uint8_t((write ? kWrite : 0) | (atomic ? kAtomic : 0));
  if (g_heap->contains(a)) {
  } else if (a - uintptr_t(b.smem) < kStaticSmemLimit) {
    flags |= kShared;
  } else {
    return;  // the thread's stack (registers on a GPU), the launch's parameters, constants
  }
  b.perf->logs[t.linear].push_back(Access{a, pc, uint32_t(n), flags});
}

void perf_epoch_end(BlockCtx& b) {
  if (b.perf) group_requests(b);
}

void perf_block_end(BlockCtx& b) {
  if (!b.perf) return;
  if (!b.faulted) {
    group_requests(b);
    std::lock_guard<std::mutex> g(b.perf->launch->mu);
    b.perf->launch->counters.add(b.perf->counters);
  }
  b.perf = nullptr;
}

void perf_op_done(const Op& op) {
  if (!op.perf || op.skipped) return;
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  switch (op.kind) {
    case Op::Kind::kernel: {
      const KernelLaunch& L = *op.kernel;
      // A header's __FILE__ is as its #include found it ("./kernels/cuda/x.cuh" through -I.).
      std::string site = std::string(L.site.file) + ":" + std::to_string(L.site.line);
      if (site.rfind("./", 0) == 0) site.erase(0, 2);
      // Named now from GCC's pretty name, else by the entry's symbol when written.
      char entry[32];
      std::snprintf(entry, sizeof entry, "entry %p", L.site.entry);
      const bool resolved = L.site.pretty && !std::strstr(L.site.pretty, "= (&");  // simt.h, instance_name
      const std::string name = resolved       ? instance_from_pretty(L.site.pretty)
                               : L.site.entry ? std::string(entry)
                                              : std::string(L.site.kernel);
      Record& r = record_for(s, "kernel", name, site, L.grid, L.block, L.dynamic_smem, "");
      r.written = L.site.kernel;
      if (!resolved) r.entry = L.site.entry;
      r.math = L.flops_f64 ? "f64" : "f32";
      ++r.launches;
      r.graph_node_launches += op.graph_node;
      r.flops += L.flops;
      if (op.launch_perf) {
        r.c.add(op.launch_perf->counters);
        r.dram_bytes += op.launch_perf->distinct_bytes();
      }
      break;
    }
    case Op::Kind::library: {
      if (!op.library_cost) return;  // a collective (NCCL): not the lab's
      const LibraryCost& cost = *op.library_cost;
      Record& r = record_for(s, "library", op.name, cost.api, dim3(0, 0, 0), dim3(0, 0, 0), 0, cost.shape);
      r.math = cost.math;
      ++r.launches;
      r.graph_node_launches += op.graph_node;
      r.flops += cost.flops;
      r.dram_bytes += uint64_t(cost.min_bytes);
      break;
    }
    case Op::Kind::copy:
    case Op::Kind::memset: {
      if (op.kind == Op::Kind::copy && op.copy_kind != cudaMemcpyDeviceToDevice) return;  // host transfers: not the lab's
      const bool copy = op.kind == Op::Kind::copy;
      Record& r = record_for(s, copy ? "memcpy" : "memset", op.name, "", dim3(0, 0, 0), dim3(0, 0, 0), 0,
                             std::to_string(op.bytes) + " bytes");
      ++r.launches;
      r.graph_node_launches += op.graph_node;
      r.dram_bytes += copy ? 2 * op.bytes : op.bytes;
      break;
    }
    default: break;
  }
}

void perf_graph_launch() {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  ++s.graph_launches;
}

// ---- emu.h and simt.h ------------------------------------------------------------------------------
void perf_window(bool open) {
  State& s = state();
  if (s.enabled) s.window.store(open ? 2 : 1);
}

bool perf_write() {
  State& s = state();
  return s.enabled && write_records(s);
}

namespace {
thread_local double tls_next_flops = 0;
thread_local bool tls_next_f64 = false;
}  // namespace

void next_launch_flops(double flops, bool f64) noexcept {
  tls_next_flops = flops;
  tls_next_f64 = f64;
}

// The launch takes the hint (executor.cc).
void take_launch_flops(double* flops, bool* f64) {
  *flops = tls_next_flops;
  *f64 = tls_next_f64;
  tls_next_flops = 0;
  tls_next_f64 = false;
}

}  // namespace rt::emu
