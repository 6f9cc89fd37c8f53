// `ringtape doctor`: the report on this machine (the CPU path where there is no GPU: a real
// Gloo communicator, ports), a port this test holds reported busy with this process's pid,
// MASTER_PORT's parsing, and the verdicts on GPU findings written by hand.
#include "cli/doctor.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <string>

#include "distributed/net_util.h"
#include "kernels/cuda/runtime.h"

namespace rt::cli {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A port nobody listens on right now (the kernel's pick, released again).
int free_port() {
  dist::net::Fd fd = dist::net::listen_tcp("", 0);
  return dist::net::local_port(fd.get());
}

// A report as the probes leave it on a healthy machine with `names` as its GPUs.
DoctorReport gpus_found(const std::vector<std::string>& names) {
  DoctorReport r;
  r.gpu_count = int(names.size());
  for (const auto& n : names) r.gpus.push_back({n, "79.1 GiB"});
  r.peer_access.assign(names.size(), std::vector<std::string>(names.size(), "yes"));
  r.links.assign(names.size(), std::vector<std::string>(names.size(), "NV18"));
  for (size_t i = 0; i < names.size(); ++i) r.peer_access[i][i] = "-", r.links[i][i] = "X";
  r.links_source = "NVML";
  r.nccl = "2.27.3";
  r.ports = {{29500, true, "", ""}};
  r.loopback.ok = r.gloo.ok = true;
  return r;
}

TEST_CASE("no GPU: the report says so, checks Gloo and the ports, and the verdict is CPU only") {
  const int port = free_port();
  const DoctorReport r = run_doctor(doctor_options(std::to_string(port).c_str(), 2));
  const std::string text = format_doctor(r);
  INFO(text);
  CHECK(r.gloo.ok);
  CHECK(r.loopback.ok);
  REQUIRE(r.ports.size() == 2);
  CHECK(r.ports[0].port == port);
  CHECK(r.ports[0].free);
  CHECK(has(text, "gloo: ok: a one-rank communicator over TCP on 127.0.0.1"));
  CHECK(has(text, "cuda runtime: "));
  CHECK(has(text, "nccl: "));
  if (cuda::device_count() > 0) {
    MESSAGE("a GPU is present: the no-GPU verdict is not checked");
    CHECK(has(r.verdict, "GPU training"));
    return;
  }
  CHECK(r.gpu_count == 0);
  CHECK(!r.no_gpu_reason.empty());
  CHECK(has(text, "gpus: none ("));
  CHECK(r.usable);
  CHECK(r.problems.empty());
  CHECK(r.verdict.rfind("CPU only: data parallelism runs on Gloo", 0) == 0);
  CHECK(has(text, "verdict: CPU only: data parallelism runs on Gloo"));
}

TEST_CASE("a port held by this process is busy and names this pid; the verdict is not usable") {
  const dist::net::Fd held = dist::net::listen_tcp("127.0.0.1", 0);
  const int port = dist::net::local_port(held.get());
  const DoctorReport r = run_doctor(doctor_options(std::to_string(port).c_str(), 1));
  const std::string pid = "pid " + std::to_string(getpid());
  INFO(format_doctor(r));
  REQUIRE(r.ports.size() == 1);
  CHECK_FALSE(r.ports[0].free);
  CHECK(has(r.ports[0].holder, pid));
  CHECK(has(format_doctor(r), std::to_string(port) + "  in use by " + pid));
  CHECK_FALSE(r.usable);
  CHECK(has(r.verdict, "not ready: MASTER_PORT " + std::to_string(port) + " is in use by " + pid));
}

TEST_CASE("MASTER_PORT: the environment's when it is a port; otherwise the default, and a problem") {
  CHECK(doctor_options(nullptr).first_port == 29500);
  CHECK(doctor_options("").first_port == 29500);
  CHECK(doctor_options(nullptr).port_problem.empty());
  const DoctorOptions set = doctor_options("31000", 3);
  CHECK(set.first_port == 31000);
  CHECK(set.port_count == 3);
  CHECK(set.port_source == "MASTER_PORT from the environment");
  for (const char* bad : {"abc", "0", "70000", "12x", "-5"}) {
    CAPTURE(bad);
    const DoctorOptions o = doctor_options(bad);
    CHECK(o.first_port == 29500);
    CHECK(has(o.port_problem, "MASTER_PORT='" + std::string(bad) + "' is not a port"));
    DoctorReport r = gpus_found({"H100"});
    doctor_verdict(o, r);
    CHECK_FALSE(r.usable);
    CHECK(has(r.verdict, "not ready: MASTER_PORT='"));
  }
}

TEST_CASE("verdicts on GPU findings: ready, mixed models, NCCL missing, no peer access, a busy port") {
  const DoctorOptions o;
  SUBCASE("ready") {
    DoctorReport r = gpus_found({"H100", "H100"});
    doctor_verdict(o, r);
    CHECK(r.usable);
    CHECK(r.verdict == "ready for 2-GPU training");
    CHECK(r.warnings.empty());
    const std::string text = format_doctor(r);
    CHECK(has(text, "links (NVML):"));
    CHECK(has(text, "cuda:0  X       NV18"));
  }
  SUBCASE("different models: not ready, and which GPUs to keep") {
    DoctorReport r = gpus_found({"H100", "A100", "H100"});
    doctor_verdict(o, r);
    CHECK_FALSE(r.usable);
    CHECK(has(r.verdict, "different models (cuda:0 H100, cuda:1 A100, cuda:2 H100)"));
    CHECK(has(r.verdict, "CUDA_VISIBLE_DEVICES=0,2"));
  }
  SUBCASE("NCCL missing: a problem with several GPUs, a warning with one") {
    DoctorReport two = gpus_found({"H100", "H100"}), one = gpus_found({"H100"});
    two.nccl = one.nccl = "unknown (libnccl.so.2: cannot open shared object file)";
    doctor_verdict(o, two);
    doctor_verdict(o, one);
    CHECK_FALSE(two.usable);
    CHECK(has(two.verdict, "NCCL is missing"));
    CHECK(one.usable);
    CHECK(one.verdict == "ready for 1-GPU training");
    REQUIRE(one.warnings.size() == 1);
    CHECK(has(one.warnings[0], "several GPUs or nodes need libnccl.so.2"));
  }
  SUBCASE("no peer access: usable, with a warning naming the pair") {
    DoctorReport r = gpus_found({"H100", "H100", "H100"});
    r.peer_access[1][2] = "no";
    doctor_verdict(o, r);
    CHECK(r.usable);
    REQUIRE(r.warnings.size() == 1);
    CHECK(has(r.warnings[0], "no peer access between cuda:1-cuda:2"));
  }
  SUBCASE("MASTER_PORT busy: the fix names a free port of the range") {
    DoctorReport r = gpus_found({"H100"});
    r.ports = {{29500, false, "pid 7 (torchrun)", "cannot listen on *:29500: port 29500 is already in use by pid 7"},
               {29501, false, "", "... already in use"},
               {29502, true, "", ""}};
    doctor_verdict(doctor_options("29500"), r);  // chosen in the environment: it must be free
    CHECK_FALSE(r.usable);
    CHECK(has(r.verdict, "MASTER_PORT 29500 is in use by pid 7 (torchrun)"));
    CHECK(has(r.verdict, "MASTER_PORT=29502, which is free"));
  }
  SUBCASE("the default port busy: usable (the launcher picks a free port), with a warning") {
    // Before: "not ready", although ringtape --nproc-per-node does not use 29500.
    DoctorReport r = gpus_found({"H100"});
    r.ports = {{29500, false, "pid 7 (torchrun)", "cannot listen on *:29500: port 29500 is already in use by pid 7"},
               {29501, true, "", ""}};
    doctor_verdict(o, r);
    CHECK(r.usable);
    REQUIRE(r.warnings.size() == 1);
    CHECK(has(r.warnings[0], "MASTER_PORT 29500 is in use by pid 7 (torchrun)"));
    CHECK(has(r.warnings[0], "ringtape --nproc-per-node alone picks a free port itself"));
  }
  SUBCASE("no GPU and no Gloo: not ready") {
    DoctorReport r;
    r.ports = {{29500, true, "", ""}};
    r.loopback.ok = true;
    r.gloo.detail = "cannot connect";
    doctor_verdict(o, r);
    CHECK_FALSE(r.usable);
    CHECK(has(r.verdict, "Gloo does not work (cannot connect)"));
  }
}

}  // namespace
}  // namespace rt::cli
