// `ringtape doctor`'s questions to the CUDA runtime, cuDNN, NCCL and NVML (see
// doctor_probe.h). Host code only.
#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "kernels/cuda/check.h"
#include "cli/doctor_probe.h"

namespace rt::cli::probe {

namespace {

// "13.0" from CUDA's 13000.
std::string cuda_text(int v) { return detail::cat(v / 1000, ".", (v % 1000) / 10); }

// "9.10.2" from a library's version code: major * unit + minor * 100 + patch. cuDNN 9 and
// NCCL 2.9 moved from unit 1000 to 10000.
std::string release_text(long v, long unit) { return detail::cat(v / unit, ".", (v % unit) / 100, ".", v % 100); }

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// The driver's version from the kernel module's own line ("NVRM version: NVIDIA UNIX x86_64
// Kernel Module  580.65.06  ..."): its first dotted number. "" when not there.
std::string proc_driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line, word;
  std::getline(in, line);
  std::istringstream words(line);
  while (words >> word)
    if (word.find('.') != std::string::npos && word.find_first_not_of("0123456789.") == std::string::npos) return word;
  return "";
}

// NVML, declared here: nvml.h is not among the installed CUDA headers, and the library comes
// with the driver, so it is opened at run time (the binary then starts without it). Only
// the entry points and the one struct this file reads; layouts as in nvml.h.
using NvmlReturn = int;  // nvmlReturn_t: 0 is NVML_SUCCESS
using NvmlDevice = struct NvmlDeviceSt*;
struct NvmlPciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS
constexpr unsigned kRemoteSwitch = 2;   // NVML_NVLINK_DEVICE_TYPE_SWITCH

class Nvml {
 public:
  Nvml() { open(); }
  ~Nvml() {
    if (initialized_) shutdown_();
    if (lib_) dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // "" when usable; else why not ("libnvidia-ml.so.1: cannot open shared object file ...").
  const std::string& why_not() const { return why_not_; }
  std::string error(NvmlReturn r) const { return error_string_(r); }

  NvmlReturn (*driver_version)(char* out, unsigned length) = nullptr;
  NvmlReturn (*handle_by_bus_id)(const char* bus_id, NvmlDevice* out) = nullptr;
  NvmlReturn (*common_ancestor)(NvmlDevice a, NvmlDevice b, unsigned* level) = nullptr;
  NvmlReturn (*link_state)(NvmlDevice d, unsigned link, unsigned* active) = nullptr;
  NvmlReturn (*remote_pci)(NvmlDevice d, unsigned link, NvmlPciInfo* out) = nullptr;
  NvmlReturn (*remote_type)(NvmlDevice d, unsigned link, unsigned* type) = nullptr;  // may be absent (old drivers)

 private:
  template <typename F>
  bool resolve(const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(lib_, name));
    if (!f && why_not_.empty()) why_not_ = detail::cat("libnvidia-ml.so.1 has no ", name, " (a driver too old)");
    return f != nullptr;
  }

  void open() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      why_not_ = dl_error();
      return;
    }
    NvmlReturn (*init)() = nullptr;
    resolve("nvmlInit_v2", init);
    resolve("nvmlShutdown", shutdown_);
    resolve("nvmlErrorString", error_string_);
    resolve("nvmlSystemGetDriverVersion", driver_version);
    resolve("nvmlDeviceGetHandleByPciBusId_v2", handle_by_bus_id);
    resolve("nvmlDeviceGetTopologyCommonAncestor", common_ancestor);
    resolve("nvmlDeviceGetNvLinkState", link_state);
    resolve("nvmlDeviceGetNvLinkRemotePciInfo_v2", remote_pci);
    remote_type = reinterpret_cast<decltype(remote_type)>(dlsym(lib_, "nvmlDeviceGetNvLinkRemoteDeviceType"));
    if (!why_not_.empty()) return;
    const NvmlReturn r = init();
    if (r != 0) {
      why_not_ = detail::cat("nvmlInit: ", error(r));
      return;
    }
    initialized_ = true;
  }

  void* lib_ = nullptr;
  bool initialized_ = false;
  std::string why_not_;
  NvmlReturn (*shutdown_)() = nullptr;
  const char* (*error_string_)(NvmlReturn) = nullptr;
};

// Opened once, on first use; shut down at exit.
Nvml& nvml() {
  static Nvml n;
  return n;
}

struct PciAddress {
  int domain = -1, bus = -1, device = -1;
};

PciAddress pci_address(int device) {
  PciAddress a;
  CUDA_CHECK(cudaDeviceGetAttribute(&a.domain, cudaDevAttrPciDomainId, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&a.bus, cudaDevAttrPciBusId, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&a.device, cudaDevAttrPciDeviceId, device));
  return a;
}

// nvidia-smi's name for the PCIe path whose closest common ancestor is `level`
// (nvmlGpuTopologyLevel_t).
std::string pcie_path(unsigned level) {
  switch (level) {
    case 0: return "BOARD";  // NVML_TOPOLOGY_INTERNAL: two GPUs on one board
    case 10: return "PIX";
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    case 50: return "SYS";
    default: return "?";
  }
}

void nvml_links(const Nvml& nv, int n, Links& out) {
  std::vector<NvmlDevice> handle(size_t(n), nullptr);
  std::vector<PciAddress> pci(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    pci[i] = pci_address(i);
    const NvmlReturn r = nv.handle_by_bus_id(pci_bus_id(i).c_str(), &handle[i]);
    RT_CHECK(r == 0, "NVML does not know cuda:", i, " (bus ", pci_bus_id(i), "): ", nv.error(r));
  }
  // NVLinks per pair, counted from each GPU's active links: to a GPU (found by its PCI
  // address) or to an NVSwitch.
  std::vector<std::vector<int>> direct(size_t(n), std::vector<int>(size_t(n), 0));
  std::vector<int> to_switch(size_t(n), 0);
  for (int i = 0; i < n; ++i) {
    for (unsigned l = 0; l < kNvmlMaxLinks; ++l) {
      unsigned active = 0, type = 0;
      if (nv.link_state(handle[i], l, &active) != 0 || !active) continue;  // PCIe-only GPUs say "not supported"
      if (nv.remote_type && nv.remote_type(handle[i], l, &type) == 0 && type == kRemoteSwitch) {
        ++to_switch[i];
        continue;
      }
      NvmlPciInfo remote{};
      if (nv.remote_pci(handle[i], l, &remote) != 0) continue;
      for (int j = 0; j < n; ++j)
        if (int(remote.domain) == pci[j].domain && int(remote.bus) == pci[j].bus &&
            int(remote.device) == pci[j].device)
          ++direct[i][j];
    }
  }
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      // Through NVSwitches a pair has as many links as the one of the two with fewer.
      const int nvlinks = direct[i][j] ? direct[i][j] : std::min(to_switch[i], to_switch[j]);
      unsigned level = 0;
      out.cell[i][j] = nvlinks ? detail::cat("NV", nvlinks)
                       : nv.common_ancestor(handle[i], handle[j], &level) == 0 ? pcie_path(level)
                                                                                : "?";
    }
}

void cuda_links(int n, Links& out) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int access = 0, rank = 0;
      if (cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, i, j) != cudaSuccess ||
          (access && cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, i, j) != cudaSuccess)) {
        cudaGetLastError();
        continue;  // stays "?"
      }
      out.cell[i][j] = access ? detail::cat("rank ", rank) : "no P2P";
    }
}

}  // namespace

bool driver_installed() {
  std::ifstream in("/proc/driver/nvidia/version");
  return bool(in);
}

std::string driver_version() {
  int cuda = 0;
  if (cudaDriverGetVersion(&cuda) != cudaSuccess) cudaGetLastError();  // 0: no libcuda.so.1
  std::string own;
  const Nvml& nv = nvml();
  char buf[96] = {};
  if (nv.why_not().empty() && nv.driver_version(buf, sizeof buf) == 0) own = buf;
  if (own.empty()) own = proc_driver_version();
  if (cuda == 0 && own.empty())
    return "none (no NVIDIA driver: libcuda.so.1 does not load, /proc/driver/nvidia is absent)";
  return detail::cat(own.empty() ? "version unknown" : own, ", supports CUDA ",
                     cuda ? cuda_text(cuda) : "unknown (libcuda.so.1 does not load)");
}

std::string runtime_version() {
  int v = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&v));
  return cuda_text(v);
}

std::string cudnn_version() {
  const long v = long(cudnnGetVersion()), built = CUDNN_VERSION;
  const std::string now = release_text(v, v >= 90000 ? 10000 : 1000);
  const std::string then = release_text(built, built >= 90000 ? 10000 : 1000);
  return now == then ? now : detail::cat(now, " (built with ", then, ")");
}

std::string nccl_version() {
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return detail::cat("unknown (", dl_error(), ")");
  auto get = reinterpret_cast<int (*)(int*)>(dlsym(lib, "ncclGetVersion"));  // ncclResult_t ncclGetVersion(int*)
  int v = 0;
  const std::string out = !get            ? "unknown (libnccl.so.2 has no ncclGetVersion)"
                          : get(&v) != 0  ? "unknown (ncclGetVersion failed)"
                                          : release_text(v, v >= 20900 ? 10000 : 1000);
  dlclose(lib);
  return out;
}

std::string pci_bus_id(int device) {
  char buf[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(buf, sizeof buf, device));
  return buf;
}

bool can_access_peer(int device, int peer) {
  int can = 0;
  CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
  return can != 0;
}

Links links(int n) {
  Links out;
  for (int i = 0; i < n; ++i) {  // row by row: assigning "X" into a filled matrix trips g++ 12's -Wrestrict
    out.cell.emplace_back();
    for (int j = 0; j < n; ++j) out.cell.back().emplace_back(i == j ? "X" : "?");
  }
  const Nvml& nv = nvml();
  std::string nvml_failed = nv.why_not();
  if (nvml_failed.empty()) {
    try {
      nvml_links(nv, n, out);
      out.source = "NVML";
      return out;
    } catch (const Error& e) {
      nvml_failed = e.what();
    }
  }
  cuda_links(n, out);
  out.source = detail::cat("NVLink or PCIe unknown (NVML: ", nvml_failed,
                           "); cudaDeviceGetP2PAttribute's performance rank instead (0 = fastest)");
  return out;
}

}  // namespace rt::cli::probe
