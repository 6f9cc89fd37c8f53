#include "profile/trace.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "base/error.h"

namespace rt::prof {
namespace {

double us(int64_t ns, int64_t origin) { return double(ns - origin) / 1e3; }

json::Value meta(const char* what, int pid, int64_t tid, const std::string& name) {
  json::Value args = json::Value::object();
  args.set("name", name);
  json::Value e = json::Value::object();
  e.set("ph", "M");
  e.set("name", what);
  e.set("pid", pid);
  e.set("tid", tid);
  e.set("args", std::move(args));
  return e;
}

json::Value slice(const std::string& name, const char* cat, int pid, int64_t tid, double ts, double dur) {
  json::Value e = json::Value::object();
  e.set("ph", "X");
  e.set("name", name);
  e.set("cat", cat);
  e.set("pid", pid);
  e.set("tid", tid);
  e.set("ts", ts);
  e.set("dur", std::max(dur, 0.0));
  return e;
}

bool is_gpu(EventKind k) { return k == EventKind::kernel || k == EventKind::memcpy || k == EventKind::memset; }

}  // namespace

json::Value trace_json(const std::vector<Event>& events, const std::vector<std::string>& thread_names, int rank) {
  const int host_pid = 2 * rank, gpu_pid = 2 * rank + 1;
  int64_t origin = INT64_MAX;
  for (const Event& e : events) origin = std::min(origin, e.begin_ns);
  if (events.empty()) origin = 0;

  json::Value out = json::Value::array();
  out.push_back(meta("process_name", host_pid, 0, "rank " + std::to_string(rank) + " host"));
  std::set<uint32_t> tids;
  for (const Event& e : events)
    if (!is_gpu(e.kind)) tids.insert(e.tid);
  for (uint32_t tid : tids)
    out.push_back(meta("thread_name", host_pid, tid, tid < thread_names.size() ? thread_names[tid] : "thread"));

  // GPU streams, named by what runs on them.
  std::map<uint32_t, std::pair<int, int>> streams;  // stream -> (kernels, NCCL kernels); copies count as kernels
  std::map<uint32_t, int> copies;
  for (const Event& e : events) {
    if (!is_gpu(e.kind)) continue;
    auto& s = streams[e.stream];
    if (e.kind == EventKind::kernel) {
      ++s.first;
      if (e.name.find("nccl") != std::string::npos || e.name.find("Nccl") != std::string::npos) ++s.second;
    } else {
      ++copies[e.stream];
    }
  }
  if (!streams.empty()) {
    out.push_back(meta("process_name", gpu_pid, 0, "rank " + std::to_string(rank) + " GPU"));
    for (const auto& [id, n] : streams) {
      const char* role = n.second > 0 && n.second * 2 >= n.first ? "communication"
                         : n.first == 0                           ? "copies"
                                                                  : "compute";
      out.push_back(meta("thread_name", gpu_pid, id, std::string(role) + " (stream " + std::to_string(id) + ")"));
    }
  }

  std::unordered_map<uint64_t, const Event*> op_of;
  for (const Event& e : events)
    if (e.kind == EventKind::op) op_of[e.id] = &e;
  int64_t flow = 0;
  for (const Event& e : events) {
    const double ts = us(e.begin_ns, origin), dur = double(e.end_ns - e.begin_ns) / 1e3;
    switch (e.kind) {
      case EventKind::counter: {
        json::Value args = json::Value::object();
        args.set("allocated MiB", e.cost.bytes / 1048576.0);
        args.set("reserved MiB", e.cost.flops / 1048576.0);
        json::Value c = json::Value::object();
        c.set("ph", "C");
        c.set("name", e.name);
        c.set("pid", host_pid);
        c.set("tid", 0);
        c.set("ts", ts);
        c.set("args", std::move(args));
        out.push_back(std::move(c));
        break;
      }
      case EventKind::kernel:
      case EventKind::memcpy:
      case EventKind::memset: {
        json::Value s = slice(e.name, kind_name(e.kind), gpu_pid, e.stream, ts, dur);
        json::Value args = json::Value::object();
        if (e.kind != EventKind::kernel) args.set("bytes", e.cost.bytes);
        const auto owner = op_of.find(e.id);
        if (owner != op_of.end()) {
          args.set("op", owner->second->name + (owner->second->backward ? " backward" : ""));
          args.set("layer", owner->second->path);
          // A flow arrow from the op's slice to this kernel (Perfetto binds "s" to the
          // enclosing slice on the host track, "f" with bp=e to this one).
          json::Value s0 = json::Value::object(), f0 = json::Value::object();
          ++flow;
          for (json::Value* f : {&s0, &f0}) {
            f->set("name", "launch");
            f->set("cat", "launch");
            f->set("id", flow);
          }
          s0.set("ph", "s");
          s0.set("pid", host_pid);
          s0.set("tid", int64_t(owner->second->tid));
          s0.set("ts", us(owner->second->begin_ns, origin));
          f0.set("ph", "f");
          f0.set("bp", "e");
          f0.set("pid", gpu_pid);
          f0.set("tid", int64_t(e.stream));
          f0.set("ts", ts);
          out.push_back(std::move(s0));
          out.push_back(std::move(f0));
        }
        s.set("args", std::move(args));
        out.push_back(std::move(s));
        break;
      }
      default: {
        const std::string name = e.kind == EventKind::op && e.backward ? e.name + " backward" : e.name;
        json::Value s = slice(name, kind_name(e.kind), host_pid, e.tid, ts, dur);
        if (e.kind == EventKind::op) {
          json::Value args = json::Value::object();
          args.set("layer", e.path);
          args.set("inputs", e.detail);
          args.set("phase", e.phase);
          args.set("flops", e.cost.flops);
          args.set("bytes", e.cost.bytes);
          args.set("self_us", double(e.self_ns()) / 1e3);
          args.set("step", e.step + 1);
          s.set("args", std::move(args));
        }
        out.push_back(std::move(s));
      }
    }
  }
  json::Value t = json::Value::object();
  t.set("traceEvents", std::move(out));
  t.set("displayTimeUnit", "ms");
  return t;
}

void write_trace(const std::string& path, const std::vector<Event>& events,
                 const std::vector<std::string>& thread_names, int rank) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    RT_CHECK(f, "cannot write the trace ", tmp);
    f << json::dump(trace_json(events, thread_names, rank)) << "\n";
    RT_CHECK(f.good(), "writing the trace ", tmp, " failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  RT_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace rt::prof
