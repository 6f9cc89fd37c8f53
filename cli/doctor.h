// `ringtape doctor`: can this machine train, and on what? It looks at the GPUs (count,
// models, driver, CUDA runtime, cuDNN and NCCL versions, peer access, NVLink/PCIe links),
// the ports a job would listen on, and the CPU path (a real one-rank Gloo communicator over
// TCP on 127.0.0.1), then gives a one-line verdict.
//
// Every probe catches its own errors and reports them as a line of the report: the doctor
// never stops on a broken machine, since describing it is its job. The report is a struct
// (run_doctor) and its text a separate function (format_doctor), so tests check the
// findings without parsing the output.
#pragma once

#include <string>
#include <vector>

namespace rt::cli {

struct DoctorOptions {
  int first_port = 29500;  // MASTER_PORT: where rank 0 hosts the rendezvous store
  int port_count = 4;      // ports checked: first_port, first_port + 1, ...
  std::string port_source = "MASTER_PORT's default";
  std::string port_problem;  // MASTER_PORT is set but is not a port: a problem of the report
};

// Options for this environment: MASTER_PORT when it is set (`master_port` is its value, or
// nullptr when unset).
DoctorOptions doctor_options(const char* master_port, int port_count = 4);

struct DoctorGpu {
  std::string name;   // "NVIDIA H100 80GB HBM3"; "" when its properties could not be read
  std::string about;  // "79.1 GiB, 132 SMs, compute capability 9.0, PCI 0000:1B:00.0", or the error
};

struct DoctorPort {
  int port = 0;
  bool free = false;
  std::string holder;  // for a busy port: "pid 123 (python train.py)", "" when not visible
  std::string error;   // why it could not be listened on
};

struct DoctorCheck {
  bool ok = false;
  std::string detail;  // what was done, or what failed
};

struct DoctorReport {
  int gpu_count = 0;
  std::string no_gpu_reason;  // why CUDA sees no GPU ("" when it sees some)
  bool driver_installed = false;
  std::vector<DoctorGpu> gpus;
  std::string driver, cuda_runtime, cudnn, nccl;
  // (n, n): "yes" / "no" (cudaDeviceCanAccessPeer(a, b)), "-" for a == b, or the error.
  std::vector<std::vector<std::string>> peer_access;
  std::vector<std::vector<std::string>> links;  // (n, n), see cli/doctor_probe.h
  std::string links_source;
  std::string port_source;
  std::vector<DoctorPort> ports;
  DoctorCheck loopback;  // a socket listening on 127.0.0.1
  DoctorCheck gloo;      // a one-rank Gloo communicator, its store, and an all_reduce
  std::vector<std::string> warnings;  // what works but deserves attention, each with its remedy
  std::vector<std::string> problems;  // what stops training, each with its fix
  std::string verdict;                // one line
  bool usable = false;                // the verdict is one to train with (no problems)
};

// Runs every probe, then doctor_verdict. Never throws.
DoctorReport run_doctor(const DoctorOptions& opts);
// Fills warnings, problems, verdict and usable from the probes' findings in `r`.
void doctor_verdict(const DoctorOptions& opts, DoctorReport& r);
// The report as `ringtape doctor` prints it, ending in "verdict: ...".
std::string format_doctor(const DoctorReport& r);

// `ringtape doctor [flags]`: prints the report; returns the exit status (0: usable verdict,
// 1: not). Throws UsageError (cli/flags.h) on a bad flag.
int doctor_command(const std::vector<std::string>& args);

}  // namespace rt::cli
