// Logging, the last error, the peer timeout and type names of the NCCL fake (nccl_common.h).
#include "cuda_emu/nccl_common.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rt::emu::nccl {
namespace {

int debug_level() {  // 0 none, 1 WARN, 2 INFO (and TRACE)
  static const int level = [] {
    const char* v = std::getenv("NCCL_DEBUG");
    if (!v) return 0;
    if (!strcasecmp(v, "WARN")) return 1;
    if (!strcasecmp(v, "INFO") || !strcasecmp(v, "TRACE")) return 2;
    return 0;
  }();
  return level;
}

std::mutex g_last_mu;
std::string& last() {
  static auto* s = new std::string;  // leaked: read by threads until the process ends
  return *s;
}

void print(const char* level, const std::string& msg) {
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  std::fprintf(stderr, "%s:%d [nccl-emu] NCCL %s %s\n", host, int(getpid()), level, msg.c_str());
  std::fflush(stderr);
}

}  // namespace

Clock::duration peer_timeout() {
  static const Clock::duration t = [] {
    const char* v = std::getenv("RINGTAPE_EMU_NCCL_TIMEOUT");
    double s = 300;
    if (v && *v) {
      char* end = nullptr;
      s = std::strtod(v, &end);
      if (*end || !(s > 0) || s > 1e6) {
        std::fprintf(stderr, "nccl-emu: RINGTAPE_EMU_NCCL_TIMEOUT='%s' is not a number of seconds from 0 to 1e6 "
                     "(e.g. 30); unset it for the default of 300\n", v);
        std::fflush(stderr);
        std::_Exit(2);
      }
    }
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }();
  return t;
}

std::string timeout_text() {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%g s (RINGTAPE_EMU_NCCL_TIMEOUT)",
                std::chrono::duration<double>(peer_timeout()).count());
  return buf;
}

void warn(const std::string& msg) {
  {
    std::lock_guard<std::mutex> g(g_last_mu);
    last() = msg;
  }
  if (debug_level() >= 1) print("WARN", msg);
}

void info(const std::string& msg) {
  if (debug_level() >= 2) print("INFO", msg);
}

std::string last_error() {
  std::lock_guard<std::mutex> g(g_last_mu);
  return last();
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

const char* type_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    case ncclFloat8e4m3: return "ncclFloat8e4m3";
    case ncclFloat8e5m2: return "ncclFloat8e5m2";
    default: return "an unknown ncclDataType_t";
  }
}

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "ncclSum";
    case ncclProd: return "ncclProd";
    case ncclMax: return "ncclMax";
    case ncclMin: return "ncclMin";
    case ncclAvg: return "ncclAvg";
    default: return "an unknown ncclRedOp_t";
  }
}

bool reducible(ncclDataType_t t) { return type_size(t) != 0 && t != ncclFloat8e4m3 && t != ncclFloat8e5m2; }

}  // namespace rt::emu::nccl
