#include "profile/peaks.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/error.h"
#include "engine/io/json.h"
#include "kernels/cpu/conv2d_onednn.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cuda/runtime.h"

namespace rt::prof {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown CPU";
}

template <typename F>
double best_seconds(int runs, F&& f) {
  f();  // warm-up: page faults, thread team, caches
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

double cpu_copy_bandwidth() {
  const size_t n = size_t(64) << 20;  // 64 MiB: far beyond the last-level cache
  std::vector<char> src(n, 1), dst(n, 0);
  const double s = best_seconds(5, [&] {
    cpu::parallel_range(int64_t(n), [&](int64_t b, int64_t e) { std::memcpy(dst.data() + b, src.data() + b, size_t(e - b)); });
  });
  return 2.0 * double(n) / s;
}

template <typename T>
double cpu_gemm_flops() {
  const int64_t n = 1024;
  std::vector<T> a(size_t(n * n), T(0.5)), b(size_t(n * n), T(0.25)), c(size_t(n * n));
  const double s = best_seconds(3, [&] { cpu::gemm<T>(false, false, n, n, n, a.data(), n, b.data(), n, false, c.data(), n); });
  return 2.0 * double(n) * double(n) * double(n) / s;
}

// f32 FLOP/s of oneDNN's convolution (the CPU's f32 convolutions run there): a 3x3, 64 ->
// 64 channel, 56x56 NHWC layer of batch 8 (ResNet-50's first stage, 1.85 GFLOP). Its direct
// kernels beat the GEMM above by 2-3x on AVX-512 machines, and the profiler's %peak must be
// of the faster. 0 when oneDNN has no kernel for it.
double cpu_conv_flops() {
  cpu::Conv2dGeom g{};
  g.N = 8, g.C = 64, g.H = 56, g.W = 56, g.O = 64, g.KH = 3, g.KW = 3, g.HO = 56, g.WO = 56;
  g.sh = g.sw = g.ph = g.pw = g.dh = g.dw = g.groups = 1;
  g.nhwc = g.weight_ohwi = true;
  std::vector<float> x(size_t(g.N * g.C * g.H * g.W), 0.5f), w(size_t(g.O * g.C * 9), 0.25f),
      y(size_t(g.N * g.O * g.HO * g.WO));
  if (!cpu::onednn_conv2d_forward(g, x.data(), w.data(), nullptr, y.data())) return 0.0;
  const double s = best_seconds(3, [&] { cpu::onednn_conv2d_forward(g, x.data(), w.data(), nullptr, y.data()); });
  return 2.0 * double(g.N * g.O * g.HO * g.WO) * double(g.C * 9) / s;
}

double gpu_copy_bandwidth(int device) {
  const size_t n = size_t(1) << 30;
  void* a = cuda::try_malloc(device, n);
  void* b = cuda::try_malloc(device, n);
  RT_CHECK(a && b, "measuring the copy bandwidth of cuda:", device, ": could not allocate 2 GiB");
  void* stream = cuda::stream_create(device);
  void* e0 = cuda::event_create(device);
  void* e1 = cuda::event_create(device);
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    cuda::event_record(e0, stream);
    cuda::memcpy(b, a, n, cuda::CopyKind::d2d, device, stream);
    cuda::event_record(e1, stream);
    cuda::event_synchronize(e1);
    if (i > 0) best = std::min(best, double(cuda::event_elapsed_ms(e0, e1)) / 1e3);  // the first warms up
  }
  cuda::event_destroy(e0);
  cuda::event_destroy(e1);
  cuda::stream_destroy(stream);
  cuda::free(device, a);
  cuda::free(device, b);
  return 2.0 * double(n) / best;
}

json::Value to_json(const DevicePeaks& p) {
  json::Value flops = json::Value::object();
  for (const auto& [k, v] : p.flops) flops.set(k, v);
  json::Value o = json::Value::object();
  o.set("copy_bytes_per_s", p.copy_bytes_per_s);
  o.set("flops", std::move(flops));
  o.set("flops_source", p.flops_source);
  return o;
}

json::Value read_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) return json::Value::object();
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json::Value v = json::parse(ss.str());
    RT_CHECK(v.is_object(), "not an object");
    return v;
  } catch (const std::exception& e) {
    RT_FAIL("the device-peaks cache ", path, " is malformed (", e.what(), "); delete it and it will be measured again");
  }
}

}  // namespace

double DevicePeaks::flops_for(DType t, bool tf32) const {
  const std::string k = t == DType::f32 && tf32 ? "tf32" : dtype_name(t);
  const auto it = flops.find(k);
  return it == flops.end() ? 0.0 : it->second;
}

std::string key_for(Device d) {
  if (d.is_cuda()) return cuda::device_props(d.index).name;
  // "(conv)": measured with the oneDNN convolution too; entries cached before it lack it
  // and are measured again.
  return "cpu: " + cpu_model() + " x" + std::to_string(omp_get_max_threads()) + " threads (conv)";
}

std::string peaks_cache_path() {
  std::string dir;
  if (const char* c = std::getenv("RINGTAPE_CACHE_DIR"); c && *c) dir = c;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = std::string(x) + "/ringtape";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.cache/ringtape";
  else dir = "/tmp/ringtape-cache";
  return dir + "/device_peaks.json";
}

std::map<std::string, double> gpu_datasheet_flops(const std::string& name) {
  // Dense (no sparsity) peaks of the SXM parts, FLOP/s.
  if (name.find("H200") != std::string::npos || name.find("H100") != std::string::npos)
    return {{"bf16", 989.4e12}, {"f16", 989.4e12}, {"tf32", 494.7e12}, {"f32", 66.9e12}, {"f64", 66.9e12}};
  if (name.find("A100") != std::string::npos)
    return {{"bf16", 312e12}, {"f16", 312e12}, {"tf32", 156e12}, {"f32", 19.5e12}, {"f64", 19.5e12}};
  return {};
}

DevicePeaks measure_peaks(Device d) {
  DevicePeaks p;
  p.key = key_for(d);
  if (d.is_cuda()) {
    p.copy_bytes_per_s = gpu_copy_bandwidth(d.index);
    p.flops = gpu_datasheet_flops(p.key);
    if (!p.flops.empty()) p.flops_source = "datasheet (dense)";
  } else {
    p.copy_bytes_per_s = cpu_copy_bandwidth();
    const double gemm32 = cpu_gemm_flops<float>(), conv32 = cpu_conv_flops();
    p.flops = {{"f32", std::max(gemm32, conv32)}, {"f64", cpu_gemm_flops<double>()}};
    p.flops_source = conv32 > gemm32 ? std::string("measured: f32 oneDNN 3x3 convolution, f64 GEMM 1024^3 (") +
                                           cpu::gemm_isa() + ")"
                                     : std::string("measured GEMM 1024^3 (") + cpu::gemm_isa() + ")";
  }
  return p;
}

bool load_peaks(const std::string& key, DevicePeaks* out) {
  const json::Value cache = read_cache(peaks_cache_path());
  const json::Value* devices = cache.find("devices");
  if (!devices || !devices->is_object()) return false;
  const json::Value* e = devices->find(key);
  if (!e || !e->is_object()) return false;
  DevicePeaks p;
  p.key = key;
  if (const json::Value* c = e->find("copy_bytes_per_s"); c && c->is_number()) p.copy_bytes_per_s = c->as_double();
  if (const json::Value* f = e->find("flops"); f && f->is_object())
    for (const auto& [k, v] : f->as_object())
      if (v.is_number()) p.flops[k] = v.as_double();
  if (const json::Value* s = e->find("flops_source"); s && s->is_string()) p.flops_source = s->as_string();
  if (p.copy_bytes_per_s <= 0) return false;
  *out = std::move(p);
  return true;
}

void store_peaks(const DevicePeaks& p) {
  const std::string path = peaks_cache_path();
  json::Value cache = read_cache(path);
  cache.set("version", 1);
  json::Value devices = cache.find("devices") && cache.find("devices")->is_object() ? *cache.find("devices")
                                                                                      : json::Value::object();
  devices.set(p.key, to_json(p));
  cache.set("devices", std::move(devices));
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    RT_CHECK(out, "cannot write ", tmp);
    out << json::dump(cache) << "\n";
    RT_CHECK(out.good(), "writing ", tmp, " failed");
  }
  fs::rename(tmp, path, ec);
  RT_CHECK(!ec, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

DevicePeaks device_peaks(Device d) {
  DevicePeaks p;
  if (load_peaks(key_for(d), &p)) return p;
  p = measure_peaks(d);
  try {
    store_peaks(p);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "profiler: warning: could not store the measured device peaks: %s\n", e.what());
  }
  return p;
}

}  // namespace rt::prof
