// Registers, shared memory and spills of every kernel, as ptxas allocates them for sm_90.
// Under the cuda-emu configs tools/cuda.bzl runs nvcc -arch=sm_90 -cubin --resource-usage on
// every .cu file next to its C++ compilation, and appends to the file one
//   static const ::rt::emu::PtxasReport rt_emu_ptxas_report_{"kernels/cuda/x.cu", R"rtptxas(...)rtptxas"};
// (cuda_emu/simt.h): the report of ptxas is registered at static initialisation by the
// translation unit holding the kernels it describes, so it is linked whenever they are. A
// launch then finds its kernel by the name GCC gives the instantiation (the kernel lab,
// Note [Kernel lab] in perf.cc); the two compilers' names are matched as
// Note [Kernel names across compilers] in ptxas.cc says.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rt::emu {

// What ptxas reports for one entry function (kernel).
struct KernelResources {
  int registers = 0;            // per thread
  int static_shared_bytes = 0;  // __shared__ arrays (RT_SHARED); the launch's dynamic part is not included
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int stack_frame_bytes = 0;  // local memory per thread: spills and local arrays
  int barriers = 0;
  std::string mangled;    // nvcc's device-side name, as ptxas prints it
  std::string demangled;  // abi::__cxa_demangle's, e.g. "void rt::cuda::(anonymous namespace)::k<int>(long)"
  std::string source;     // the .cu file the report came from, as its #line names it
};

// The kernels of one ptxas report, in its order: an entry per "Compiling entry function"
// with its "Function properties" (stack, spills) and "Used ..." line (registers, barriers,
// shared memory). Properties of called device functions that are not entries, gmem totals,
// compile times and lines it does not know are skipped. Never throws on odd text; a kernel
// whose lines are missing keeps zeros.
std::vector<KernelResources> parse_ptxas_report(std::string_view text, std::string_view source);

// The instantiated kernel from GCC's __PRETTY_FUNCTION__ of rt::emu::instance_name<&kernel>
// (simt.h): "const char* rt::emu::instance_name() [with auto Kernel = rt::cuda::{anonymous}::k<int>]"
// gives "rt::cuda::{anonymous}::k<int>". Text without that form is returned as it is;
// nullptr gives "".
std::string instance_from_pretty(const char* pretty);

// The key under which a kernel's name, GCC's or the demangler's, is matched exactly: the
// last name component with its template arguments, each spelled one way
// (Note [Kernel names across compilers]), e.g. "k<ulong,256>". For messages and tests.
std::string kernel_name_key(std::string_view name);

// Kernels found by GCC's name of the instantiation (Note [Kernel names across compilers]).
// Not synchronised: the process-wide registry below holds one under a mutex.
class KernelTable {
 public:
  void add(KernelResources k);
  void add_report(std::string_view source, std::string_view text);
  // The kernel `instance` (GCC's spelling, instance_from_pretty) launched from `launch_file`
  // (the launch's __FILE__; "" if unknown), or nullptr when no kernel matches or several
  // with different resources do. The pointer stays valid while the table lives.
  const KernelResources* find(const std::string& instance, const std::string& launch_file) const;
  size_t size() const { return entries_.size(); }
  const KernelResources& operator[](size_t i) const { return entries_[i].k; }

  // A name split for matching (defined in ptxas.cc).
  struct Name {
    std::string scope;              // the qualifiers, anonymous namespaces spelled one way
    std::string base;               // the function's own name
    bool is_template = false;
    std::vector<std::string> args;  // each template argument, normalised
    std::vector<bool> wildcard;     // per argument: a lambda or an enum value (Note [Kernel names across compilers])
    std::string key;                // base<args...>
  };

 private:
  struct Entry {
    KernelResources k;
    Name name;
  };
  std::deque<Entry> entries_;  // a deque: pointers to entries stay valid as kernels are added
  std::unordered_map<std::string, std::vector<size_t>> by_key_, by_base_;
};

// Records ptxas's report of `source` (both pointers must outlive the process: string
// literals of the .cu's translation unit). Runs during static initialisation: it stores the
// pointers and nothing else; the text is parsed on the first lookup after it.
void register_ptxas_report(const char* source, const char* text) noexcept;

// The kernel of a launch in the reports registered so far (KernelTable::find), or nullptr
// (the lab says "unknown"). Thread-safe; the pointer stays valid until the process ends.
const KernelResources* kernel_resources(const std::string& instance, const std::string& launch_file);

// The registered reports, in registration order, and every kernel they hold.
struct RegisteredReport {
  const char* source;
  const char* text;
};
std::vector<RegisteredReport> registered_ptxas_reports();
std::vector<const KernelResources*> registered_kernels();

}  // namespace rt::emu
