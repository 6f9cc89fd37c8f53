// What `ringtape doctor` (cli/doctor.h) asks the CUDA side: the versions of the driver and
// of the libraries, peer access and the links between GPUs. A plain C++ interface, like
// runtime.h. Nothing here needs more than the binary already links to start: NVML
// (libnvidia-ml.so.1, which comes with the driver) and NCCL (libnccl.so.2) are opened with
// dlopen when asked, and their absence is an answer ("unknown: ..."), never an error.
#pragma once

#include <string>
#include <vector>

namespace rt::cli::probe {

// "580.65.06, supports CUDA 13.0": the driver's own version (NVML, else
// /proc/driver/nvidia/version) and the CUDA version it supports (cudaDriverGetVersion).
// "none (...)" when no driver is installed.
std::string driver_version();
// Whether an NVIDIA kernel driver is loaded on this machine (/proc/driver/nvidia exists),
// whether or not CUDA can use it.
bool driver_installed();
// "13.0": the CUDA runtime this binary carries (cudaRuntimeGetVersion).
std::string runtime_version();
// "9.10.2" (cudnnGetVersion), with "(built with 9.8.0)" when the headers were another one.
std::string cudnn_version();
// "2.27.3" (libnccl.so.2's ncclGetVersion); "unknown (<why libnccl.so.2 did not load>)".
std::string nccl_version();

// The device's PCI bus id, "0000:1B:00.0". Throws rt::Error.
std::string pci_bus_id(int device);
// cudaDeviceCanAccessPeer: whether `device` can map `peer`'s memory. Throws rt::Error.
bool can_access_peer(int device, int peer);

// The links between `n` devices, named as `nvidia-smi topo -m` names them: "NV18" (NVLink,
// with the number of links: direct, or through NVSwitch when both GPUs have links to one),
// "PIX" (one PCIe switch), "PXB" (several), "PHB" (a host bridge), "NODE" (host bridges of
// one NUMA node), "SYS" (across NUMA nodes), "X" for a device and itself. Without NVML: the
// CUDA performance rank of the pair's peer-to-peer path (cudaDeviceGetP2PAttribute),
// "rank 0" the fastest, or "no P2P". A pair that cannot be read says "?" and source says why.
struct Links {
  std::string source;                          // how the cells were found, and what was not
  std::vector<std::vector<std::string>> cell;  // (n, n): cell[a][b]
};
Links links(int n);

}  // namespace rt::cli::probe
