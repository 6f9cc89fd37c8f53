#include "cli/doctor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cli/flags.h"
#include "distributed/gloo_communicator.h"
#include "distributed/net_util.h"
#include "distributed/rendezvous.h"
#include "base/error.h"
#include "engine/tensor.h"
#include "cli/doctor_probe.h"
#include "kernels/cuda/runtime.h"

namespace rt::cli {
namespace {

using detail::cat;

const char* kUsage =
    "usage: ringtape doctor [flags]\n\n"
    "Checks whether this machine can train, and on what: the GPUs (count, models, driver, CUDA runtime,\n"
    "cuDNN and NCCL versions, peer access, NVLink/PCIe links), whether MASTER_PORT (29500 unless set)\n"
    "and the ports after it are free, and the CPU path (a one-rank Gloo communicator over TCP on\n"
    "127.0.0.1). Ends with a one-line verdict.\n\n"
    "exit status: 0 when the verdict is usable (\"ready for N-GPU training\", \"CPU only: data\n"
    "parallelism runs on Gloo\"); 1 when something stops training (the verdict says what, and how to\n"
    "fix it); 2 for a bad flag.";

// The error `f` threw, "" when it ran through. Every probe runs through here: the doctor
// reports a failure as a line and goes on.
template <typename F>
std::string failure_of(F&& f) {
  try {
    f();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// What `f` returns, or "unknown (<its error>)".
template <typename F>
std::string answer(F&& f) {
  std::string out;
  const std::string err = failure_of([&] { out = f(); });
  return err.empty() ? out : "unknown (" + err + ")";
}

bool is_unknown(const std::string& s) { return s.rfind("unknown", 0) == 0; }

void probe_gpus(DoctorReport& r) {
  r.driver_installed = probe::driver_installed();
  const std::string err = failure_of([&] { r.gpu_count = cuda::device_count(&r.no_gpu_reason); });
  if (!err.empty()) r.no_gpu_reason = err;
  const int n = r.gpu_count;
  for (int i = 0; i < n; ++i) {
    DoctorGpu g;
    const std::string e = failure_of([&] {
      const cuda::DeviceProps p = cuda::device_props(i);
      char gib[32];
      std::snprintf(gib, sizeof gib, "%.1f GiB", double(p.total_bytes) / (1 << 30));
      g.about = cat(gib, ", ", p.sm_count, " SMs, compute capability ", p.cc_major, ".", p.cc_minor, ", PCI ",
                    probe::pci_bus_id(i));
      g.name = p.name;
    });
    if (!e.empty()) g.about = e;
    r.gpus.push_back(g);
  }
  r.peer_access.assign(size_t(n), std::vector<std::string>(size_t(n), "-"));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) r.peer_access[a][b] = answer([&] { return probe::can_access_peer(a, b) ? "yes" : "no"; });
  if (n < 2) return;  // links are between GPUs
  r.links.assign(size_t(n), std::vector<std::string>(size_t(n), "?"));
  const std::string e = failure_of([&] {
    probe::Links l = probe::links(n);
    r.links = std::move(l.cell);
    r.links_source = std::move(l.source);
  });
  if (!e.empty()) r.links_source = "unknown (" + e + ")";
}

void probe_versions(DoctorReport& r) {
  r.driver = answer(probe::driver_version);
  r.cuda_runtime = answer(probe::runtime_version);
  r.cudnn = answer(probe::cudnn_version);
  r.nccl = answer(probe::nccl_version);
}

// Each port on every interface, as rank 0's store listens when MASTER_ADDR is not loopback
// (a port bound on any one address is then busy too).
void probe_ports(const DoctorOptions& o, DoctorReport& r) {
  r.port_source = o.port_source;
  for (int p = o.first_port; p < o.first_port + o.port_count && p <= 65535; ++p) {
    DoctorPort d;
    d.port = p;
    d.error = failure_of([&] { dist::net::listen_tcp("", p); });
    d.free = d.error.empty();
    if (!d.free) failure_of([&] { d.holder = dist::net::port_holder(p); });
    std::replace_if(d.holder.begin(), d.holder.end(), [](char c) { return c == '\n' || c == '\t'; }, ' ');  // one line
    r.ports.push_back(d);
  }
  int port = 0;
  const std::string err = failure_of([&] {
    dist::net::Fd fd = dist::net::listen_tcp("127.0.0.1", 0);
    port = dist::net::local_port(fd.get());
  });
  r.loopback.ok = err.empty();
  r.loopback.detail = err.empty() ? cat("listening on 127.0.0.1 works (the kernel gave port ", port, ")") : err;
}

// The CPU path as training takes it: a store of its own on 127.0.0.1, a one-rank Gloo
// communicator connecting through it, and an all_reduce that must leave its input as it was.
void probe_gloo(DoctorReport& r) {
  const auto start = std::chrono::steady_clock::now();
  const std::string err = failure_of([] {
    const dist::Millis timeout = std::chrono::seconds(10);
    dist::RendezvousStore rs = dist::connect_store(dist::LaunchEnv{}, timeout);
    dist::CommOptions o;
    o.timeout = timeout;
    o.host = "127.0.0.1";
    o.prefix = "doctor";
    dist::GlooCommunicator comm(*rs.store, 0, 1, o);
    const std::vector<float> values = {1.5f, -2.0f, 3.25f};
    const Tensor t = Tensor::from_vector(values, {3});
    comm.all_reduce(t).wait();
    RT_CHECK(t.to_vector<float>() == values, "a one-rank all_reduce changed its input");
  });
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  r.gloo.ok = err.empty();
  r.gloo.detail = err.empty() ? cat("a one-rank communicator over TCP on 127.0.0.1 (store, connect, all_reduce) in ",
                                    ms.count(), " ms")
                              : err;
}

// "MASTER_PORT 29500 is in use by pid 1 (x): ..." with a free port of the range to use instead.
std::string busy_port_problem(const DoctorReport& r) {
  const DoctorPort& p = r.ports.front();
  std::string instead = "another port";
  for (const DoctorPort& q : r.ports)
    if (q.free) {
      instead = cat("MASTER_PORT=", q.port, ", which is free");
      break;
    }
  if (p.error.find("already in use") == std::string::npos) return cat("MASTER_PORT ", p.port, ": ", p.error);
  return cat("MASTER_PORT ", p.port, " is in use",
             p.holder.empty() ? " (by a process not visible here: `ss -ltnp` as root names it)" : " by " + p.holder,
             ": stop that process, or choose ", instead, " (ringtape --master-port or torchrun --master-port)");
}

// "cuda:0 NVIDIA H100, cuda:1 NVIDIA A100" and the CUDA_VISIBLE_DEVICES of cuda:0's model,
// when the GPUs differ; "" when they are one model.
std::string mixed_models_problem(const DoctorReport& r) {
  std::string list, same;
  bool differ = false;
  for (size_t i = 0; i < r.gpus.size(); ++i) {
    differ |= r.gpus[i].name != r.gpus[0].name;
    list += cat(i ? ", " : "", "cuda:", i, " ", r.gpus[i].name);
    if (r.gpus[i].name == r.gpus[0].name) same += cat(same.empty() ? "" : ",", i);
  }
  if (!differ) return "";
  return cat("the GPUs are of different models (", list, "): the ranks of one job run in lockstep on one model; ",
             "choose one model, e.g. CUDA_VISIBLE_DEVICES=", same);
}

void judge_gpus(DoctorReport& r) {
  for (size_t i = 0; i < r.gpus.size(); ++i)
    if (r.gpus[i].name.empty()) r.problems.push_back(cat("cuda:", i, " cannot be queried: ", r.gpus[i].about));
  const std::string mixed = mixed_models_problem(r);
  if (!mixed.empty()) r.problems.push_back(mixed);
  if (is_unknown(r.nccl)) {
    const std::string what = cat("NCCL is missing (", r.nccl, ")");
    if (r.gpu_count > 1)
      r.problems.push_back(what + ": training on several GPUs needs libnccl.so.2; install NCCL 2, or add its "
                                  "directory to LD_LIBRARY_PATH");
    else
      r.warnings.push_back(what + ": one GPU trains without it; several GPUs or nodes need libnccl.so.2");
  }
  std::string no_peer;
  const size_t n = r.peer_access.size();  // (n, n)
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b)
      if (r.peer_access[a][b] != "yes" || r.peer_access[b][a] != "yes") no_peer += cat(" cuda:", a, "-cuda:", b);
  if (!no_peer.empty())
    r.warnings.push_back("no peer access between" + no_peer +
                         ": NCCL moves their data through host memory (slower); the PCIe topology, IOMMU or a "
                         "virtual machine may forbid it");
  if (!r.gloo.ok) r.warnings.push_back("Gloo does not work (" + r.gloo.detail + "): only CUDA tensors can be reduced");
}

void judge_cpu(DoctorReport& r) {
  if (!r.loopback.ok)
    r.problems.push_back("cannot listen on 127.0.0.1 (" + r.loopback.detail +
                         "): the ranks of a CPU job meet there; bring the loopback interface up (ip link set lo up)");
  if (!r.gloo.ok)
    r.problems.push_back("Gloo does not work (" + r.gloo.detail +
                         "): CPU data parallelism runs on it; reinstall libgloo-dev (setup.sh)");
  if (r.driver_installed)
    r.warnings.push_back("an NVIDIA driver is installed but CUDA sees no GPU (" + r.no_gpu_reason +
                         "): check nvidia-smi and CUDA_VISIBLE_DEVICES, and that a container was given its GPUs "
                         "(docker --gpus all)");
}

// A (n, n) table with "cuda:i" row and column labels, columns as wide as their widest cell.
void print_matrix(std::ostringstream& os, const std::vector<std::vector<std::string>>& m) {
  const size_t n = m.size();
  size_t w = cat("cuda:", n - 1).size();
  for (const auto& row : m)
    for (const auto& cell : row) w = std::max(w, cell.size());
  auto padded = [w](const std::string& s) { return s + std::string(w + 2 - s.size(), ' '); };
  os << "  " << padded("");
  for (size_t j = 0; j < n; ++j) os << padded(cat("cuda:", j));
  os << "\n";
  for (size_t i = 0; i < n; ++i) {
    os << "  " << padded(cat("cuda:", i));
    for (size_t j = 0; j < n; ++j) os << padded(m[i][j]);
    os << "\n";
  }
}

}  // namespace

DoctorOptions doctor_options(const char* master_port, int port_count) {
  DoctorOptions o;
  o.port_count = port_count;
  if (!master_port || !*master_port) return o;
  char* end = nullptr;
  const long v = std::strtol(master_port, &end, 10);
  if (*end || v < 1 || v > 65535) {
    o.port_problem = cat("MASTER_PORT='", clip_for_message(master_port),
                         "' is not a port (1 to 65535): set it to a free one (the default is 29500)");
    return o;
  }
  o.first_port = int(v);
  o.port_source = "MASTER_PORT from the environment";
  return o;
}

void doctor_verdict(const DoctorOptions& o, DoctorReport& r) {
  if (!o.port_problem.empty()) r.problems.push_back(o.port_problem);
  // A busy default port stops only launches that use it (torchrun, --nnodes with it); ringtape
  // --nproc-per-node picks a free port itself. One that was chosen (MASTER_PORT) must be free.
  if (!r.ports.empty() && !r.ports.front().free) {
    if (o.port_source == DoctorOptions().port_source)
      r.warnings.push_back(busy_port_problem(r) + "; ringtape --nproc-per-node alone picks a free port itself");
    else
      r.problems.push_back(busy_port_problem(r));
  }
  if (r.gpu_count > 0)
    judge_gpus(r);
  else
    judge_cpu(r);
  r.usable = r.problems.empty();
  if (!r.usable)
    r.verdict = cat("not ready: ", r.problems.front(),
                    r.problems.size() > 1 ? cat(" (and ", r.problems.size() - 1, " more problem(s) above)") : "");
  else if (r.gpu_count > 0)
    r.verdict = cat("ready for ", r.gpu_count, "-GPU training");
  else
    r.verdict = cat("CPU only: data parallelism runs on Gloo",
                    r.driver_installed ? " (an NVIDIA driver is installed but CUDA sees no GPU: see the warning)" : "");
}

DoctorReport run_doctor(const DoctorOptions& opts) {
  DoctorReport r;
  probe_gpus(r);
  probe_versions(r);
  probe_ports(opts, r);
  probe_gloo(r);
  doctor_verdict(opts, r);
  return r;
}

std::string format_doctor(const DoctorReport& r) {
  std::ostringstream os;
  if (r.gpu_count == 0) os << "gpus: none (" << r.no_gpu_reason << ")\n";
  if (r.gpu_count > 0) os << "gpus: " << r.gpu_count << "\n";
  for (size_t i = 0; i < r.gpus.size(); ++i)
    os << "  cuda:" << i << "  " << (r.gpus[i].name.empty() ? "" : r.gpus[i].name + ", ") << r.gpus[i].about << "\n";
  os << "driver: " << r.driver << "\ncuda runtime: " << r.cuda_runtime << "\ncudnn: " << r.cudnn
     << "\nnccl: " << r.nccl << "\n";
  if (r.gpu_count > 1) {
    os << "peer access (cudaDeviceCanAccessPeer: can the row's GPU map the column's memory):\n";
    print_matrix(os, r.peer_access);
    os << "links (" << r.links_source << "):\n";
    print_matrix(os, r.links);
  }
  os << "ports (" << r.port_source << ", on every interface):\n";
  for (const DoctorPort& p : r.ports) {
    os << "  " << p.port << "  ";
    if (p.free)
      os << "free\n";
    else if (!p.holder.empty())
      os << "in use by " << p.holder << "\n";
    else
      os << p.error << "\n";
  }
  os << "loopback: " << (r.loopback.ok ? "ok: " : "FAILED: ") << r.loopback.detail << "\n";
  os << "gloo: " << (r.gloo.ok ? "ok: " : "FAILED: ") << r.gloo.detail << "\n";
  for (const std::string& w : r.warnings) os << "warning: " << w << "\n";
  if (r.problems.size() > 1)  // one problem is the verdict itself
    for (const std::string& p : r.problems) os << "problem: " << p << "\n";
  os << "verdict: " << r.verdict << "\n";
  return os.str();
}

int doctor_command(const std::vector<std::string>& args) {
  Flags flags({{"ports", FlagType::integer, "4", "how many ports to check, from MASTER_PORT up", {}}});
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    std::printf("%s\n", flags.help(kUsage).c_str());
    return 0;
  }
  flags.parse(args);
  const int64_t ports = flags.integer("ports");
  if (ports < 1 || ports > 100) throw UsageError(cat("flag --ports takes 1 to 100, got ", ports));
  const DoctorReport r = run_doctor(doctor_options(std::getenv("MASTER_PORT"), int(ports)));
  std::fputs(format_doctor(r).c_str(), stdout);
  return r.usable ? 0 : 1;
}

}  // namespace rt::cli
