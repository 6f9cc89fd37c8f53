// ptxas's reports (cuda_emu/ptxas.h): the parse of every line form nvcc 13's ptxas writes for
// the project's kernels, the match of GCC's kernel names to the demangled ones
// (Note [Kernel names across compilers] in cuda_emu/ptxas.cc), the registry the emulated
// build fills, and every kernel instantiation of kernels/cuda found by the name GCC gives
// it. Outside --config=cuda-emu it says SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_emu/ptxas.h"
#include "kernels/cuda/relayout.h"

namespace {

using rt::emu::instance_from_pretty;
using rt::emu::kernel_name_key;
using rt::emu::KernelResources;
using rt::emu::KernelTable;
using rt::emu::parse_ptxas_report;

// ---- ptxas's text -----------------------------------------------------------------------------

// Mangled names of the project's kernels, as nvcc 13 writes them.
const std::string kTransposeU64 =
    "_ZN2rt4cuda44_GLOBAL__N__0e294b43_11_relayout_cu_dc7dd4ae16transpose_kernelImEEvlllPKT_PS3_";
const std::string kTransposeU32 =
    "_ZN2rt4cuda44_GLOBAL__N__0e294b43_11_relayout_cu_dc7dd4ae16transpose_kernelIjEEvlllPKT_PS3_";
const std::string kRandomNormal =
    "_ZN2rt4cuda41_GLOBAL__N__5bf0b82d_9_random_cu_40affb2f13random_kernelILNS1_4DistE1EfEEvmllllbddPT0_";
const std::string kRandomUniform =
    "_ZN2rt4cuda41_GLOBAL__N__5bf0b82d_9_random_cu_40affb2f13random_kernelILNS1_4DistE0EfEEvmllllbddPT0_";

// nvcc -arch=sm_90 --resource-usage on kernels/cuda/relayout.cu, verbatim: shared memory,
// gmem and compile-time lines.
const std::string kRelayout = "ptxas info    : 0 bytes gmem\n"
                              "ptxas info    : Compiling entry function '" + kTransposeU64 + "' for 'sm_90'\n"
                              "ptxas info    : Function properties for " + kTransposeU64 + "\n"
                              "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                              "ptxas info    : Used 48 registers, used 1 barriers, 8448 bytes smem\n"
                              "ptxas info    : Compile time = 575.767 ms\n"
                              "ptxas info    : Compiling entry function '" + kTransposeU32 + "' for 'sm_90'\n"
                              "ptxas info    : Function properties for " + kTransposeU32 + "\n"
                              "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                              "ptxas info    : Used 52 registers, used 1 barriers, 4224 bytes smem\n"
                              "ptxas info    : Compile time = 371.965 ms\n"
                              "ptxas info    : 0 bytes gmem\n";

// kernels/cuda/random.cu: a stack frame with "cumulative stack size", no smem, and the
// properties of a called device function (not a kernel) after the kernel's.
const std::string kRandom = "ptxas info    : 272 bytes gmem\n"
                            "ptxas info    : Compiling entry function '" + kRandomNormal + "' for 'sm_90'\n"
                            "ptxas info    : Function properties for " + kRandomNormal + "\n"
                            "    40 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                            "ptxas info    : Used 32 registers, used 0 barriers, 40 bytes cumulative stack size\n"
                            "ptxas info    : Compile time = 215.171 ms\n"
                            "ptxas info    : Function properties for __internal_trig_reduction_slowpathd\n"
                            "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                            "ptxas info    : Compiling entry function '" + kRandomUniform + "' for 'sm_90'\n"
                            "ptxas info    : Function properties for " + kRandomUniform + "\n"
                            "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                            "ptxas info    : Used 40 registers, used 0 barriers\n"
                            "ptxas info    : Compile time = 180.005 ms\n";

// Kernels that spill (nvcc -maxrregcount=32 on a 64-float local array), verbatim but for
// the callee's figures (made non-zero, so that taking them for the kernel's would show): the
// register-limit lines, spills, cumulative stack before smem, a __noinline__ callee's block.
const std::string kSpill =
    "ptxas info    : Overriding maximum register limit 256 for '_Z5smallPf' with  32 of maxrregcount option\n"
    "ptxas info    : Overriding maximum register limit 256 for '_Z3bigPfPKfi' with  32 of maxrregcount option\n"
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function '_Z5smallPf' for 'sm_90'\n"
    "ptxas info    : Function properties for _Z5smallPf\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 8 registers, used 0 barriers\n"
    "ptxas info    : Compile time = 8.615 ms\n"
    "ptxas info    : Compiling entry function '_Z3bigPfPKfi' for 'sm_90'\n"
    "ptxas info    : Function properties for _Z3bigPfPKfi\n"
    "    608 bytes stack frame, 640 bytes spill stores, 688 bytes spill loads\n"
    "ptxas info    : Used 32 registers, used 1 barriers, 608 bytes cumulative stack size, 512 bytes smem\n"
    "ptxas info    : Compile time = 57.697 ms\n"
    "ptxas info    : Function properties for _Z6helperPfi\n"
    "    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n";

// Older ptxas (CUDA 10 and before): lmem and cmem items in the "Used" line, no barriers.
const std::string kOlder =
    "ptxas info    : Compiling entry function '_Z3oldPf' for 'sm_70'\n"
    "ptxas info    : Function properties for _Z3oldPf\n"
    "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
    "ptxas info    : Used 10 registers, 8 bytes lmem, 2048 bytes smem, 380 bytes cmem[0], 4 bytes cmem[2]\n";

TEST_CASE("ptxas's report: every line form") {
  const std::vector<KernelResources> r = parse_ptxas_report(kRelayout, "kernels/cuda/relayout.cu");
  REQUIRE(r.size() == 2);
  CHECK(r[0].demangled == "void rt::cuda::(anonymous namespace)::transpose_kernel<unsigned long>(long, long, long, "
                          "unsigned long const*, unsigned long*)");
  CHECK(r[0].registers == 48);
  CHECK(r[0].static_shared_bytes == 8448);
  CHECK(r[0].barriers == 1);
  CHECK(r[1].mangled == kTransposeU32);
  CHECK(r[1].registers == 52);
  CHECK(r[1].static_shared_bytes == 4224);
  CHECK(r[1].stack_frame_bytes == 0);
  CHECK(r[1].source == "kernels/cuda/relayout.cu");

  // The callee's "0 bytes stack frame" after random_kernel<normal> is not the kernel's.
  const std::vector<KernelResources> rnd = parse_ptxas_report(kRandom, "kernels/cuda/random.cu");
  REQUIRE(rnd.size() == 2);
  CHECK(rnd[0].registers == 32);
  CHECK(rnd[0].stack_frame_bytes == 40);
  CHECK(rnd[0].static_shared_bytes == 0);
  CHECK(rnd[0].barriers == 0);
  CHECK(rnd[1].registers == 40);
  CHECK(rnd[1].stack_frame_bytes == 0);

  const std::vector<KernelResources> sp = parse_ptxas_report(kSpill, "spill.cu");
  REQUIRE(sp.size() == 2);  // the __noinline__ helper is no kernel
  CHECK(sp[0].demangled == "small(float*)");
  CHECK(sp[0].registers == 8);
  CHECK(sp[1].registers == 32);
  CHECK(sp[1].stack_frame_bytes == 608);
  CHECK(sp[1].spill_store_bytes == 640);
  CHECK(sp[1].spill_load_bytes == 688);
  CHECK(sp[1].static_shared_bytes == 512);
  CHECK(sp[1].barriers == 1);

  const std::vector<KernelResources> old = parse_ptxas_report(kOlder, "old.cu");
  REQUIRE(old.size() == 1);
  CHECK(old[0].registers == 10);
  CHECK(old[0].static_shared_bytes == 2048);
  CHECK(old[0].stack_frame_bytes == 8);
  CHECK(old[0].spill_store_bytes == 4);

  // No kernels (kernels/cuda/blas.cu), nothing, and text that is not ptxas's.
  CHECK(parse_ptxas_report("ptxas info    : 0 bytes gmem\n", "blas.cu").empty());
  CHECK(parse_ptxas_report("", "x.cu").empty());
  CHECK(parse_ptxas_report("nvcc warning : something\n\n  Used\n", "x.cu").empty());
  // A report cut short keeps what it has.
  const std::vector<KernelResources> cut =
      parse_ptxas_report("ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'\r\n", "x.cu");
  REQUIRE(cut.size() == 1);
  CHECK(cut[0].demangled == "k()");
  CHECK(cut[0].registers == 0);
}

// ---- names --------------------------------------------------------------------------------------

TEST_CASE("the instance from GCC's __PRETTY_FUNCTION__") {
  CHECK(instance_from_pretty("const char* rt::emu::instance_name() [with auto Kernel = "
                             "rt::cuda::{anonymous}::transpose_kernel<unsigned int>]") ==
        "rt::cuda::{anonymous}::transpose_kernel<unsigned int>");
  CHECK(instance_from_pretty("const char* rt::emu::instance_name() [with auto Kernel = "
                             "rt::cuda::{anonymous}::k<rt::cuda::{anonymous}::A<float>, std::array<int, 2> >]") ==
        "rt::cuda::{anonymous}::k<rt::cuda::{anonymous}::A<float>, std::array<int, 2> >");
  CHECK(instance_from_pretty("rt::cuda::k<int>") == "rt::cuda::k<int>");
  CHECK(instance_from_pretty(nullptr).empty());
}

TEST_CASE("one key for GCC's and the demangler's spelling") {
  const std::vector<std::pair<std::string, std::string>> same = {
      {"rt::cuda::{anonymous}::k1<long unsigned int, 256>",
       "void rt::cuda::(anonymous namespace)::k1<unsigned long, 256u>(long, unsigned long const*)"},
      {"rt::cuda::{anonymous}::k5<long int, -3, true, 'A', 7>",
       "void rt::cuda::(anonymous namespace)::k5<long, -3l, true, (char)65, (short)7>(long)"},
      {"rt::cuda::{anonymous}::k6<rt::cuda::detail::Foo<short int> >",
       "void rt::cuda::(anonymous namespace)::k6<rt::cuda::detail::Foo<short> >(rt::cuda::detail::Foo<short>)"},
      {"rt::cuda::{anonymous}::k8<const unsigned int*, AxpyOp<long long int> >",
       "void rt::cuda::(anonymous namespace)::k8<unsigned int const*, rt::cuda::(anonymous namespace)::AxpyOp<long "
       "long> >(unsigned int const*, rt::cuda::(anonymous namespace)::AxpyOp<long long>)"},
      {"rt::cuda::{anonymous}::S<3>::k9<short unsigned int>",
       "void rt::cuda::(anonymous namespace)::S<3>::k9<unsigned short>(unsigned short)"},
      {"rt::cuda::{anonymous}::k8<void (*)(float), int [3]>",
       "void rt::cuda::(anonymous namespace)::k8<void (*)(float), int [3]>(void (*)(float), int [3])"},
      {"rt::cuda::{anonymous}::apply<rt::cuda::run(float*, float)::<lambda(float)> >",
       "void rt::cuda::(anonymous namespace)::apply<rt::cuda::run(float*, float)::{lambda(float)#1}>(float*, "
       "rt::cuda::run(float*, float)::{lambda(float)#1})"},
      {"rt::cuda::{anonymous}::k3<(rt::cuda::<unnamed>::Dist)7, float>",
       "void rt::cuda::(anonymous namespace)::k3<(rt::cuda::(anonymous namespace)::Dist)7, float>(float*)"},
      {"rt::emu_test::{anonymous}::scale_kernel", "rt::emu_test::(anonymous namespace)::scale_kernel(float const*, "
                                                  "long, float*)"},
  };
  for (const auto& [gcc, demangled] : same) CHECK_MESSAGE(kernel_name_key(gcc) == kernel_name_key(demangled), gcc);
  CHECK(kernel_name_key("rt::cuda::{anonymous}::k1<long unsigned int, 256>") == "k1<ulong,256>");
  CHECK(kernel_name_key("rt::cuda::{anonymous}::k<int>") != kernel_name_key("rt::cuda::{anonymous}::k<unsigned>"));
  CHECK(kernel_name_key("rt::cuda::{anonymous}::k<long int>") != kernel_name_key("void k<long long>()"));
  CHECK(kernel_name_key("rt::cuda::{anonymous}::k<char>") != kernel_name_key("void k<signed char>()"));
  CHECK(kernel_name_key("rt::cuda::{anonymous}::k<float*>") != kernel_name_key("void k<float>()"));
}

// One kernel of a report, its lines as ptxas writes them.
std::string entry(const std::string& mangled, int registers, int smem = 0, int stack = 0) {
  return "ptxas info    : Compiling entry function '" + mangled + "' for 'sm_90'\n" +
         "ptxas info    : Function properties for " + mangled + "\n    " + std::to_string(stack) +
         " bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used " +
         std::to_string(registers) + " registers, used 0 barriers" +
         (smem ? ", " + std::to_string(smem) + " bytes smem" : std::string()) + "\n";
}

// Kernels of the project's reports (nvcc's mangled names), and of an extended __device__
// lambda and an enum-valued kernel compiled by nvcc --extended-lambda.
KernelTable table() {
  KernelTable t;
  t.add_report("kernels/cuda/relayout.cu", kRelayout);
  t.add_report("kernels/cuda/random.cu", kRandom);
  t.add_report("kernels/cuda/fill.cu",
               entry("_ZN2rt4cuda39_GLOBAL__N__140a2a4b_7_fill_cu_364bcf5111fill_kernelIlEEvPT_lS3_", 24) +
                   entry("_ZN2rt4cuda39_GLOBAL__N__140a2a4b_7_fill_cu_364bcf5111fill_kernelIiEEvPT_lS3_", 20));
  t.add_report("kernels/cuda/softmax.cu",
               entry("_ZN2rt4cuda43_GLOBAL__N__26564614_10_softmax_cu_010f165c17forward_rows_warpILb1EfEEvllPKT0_PS3_",
                     39) +
                   entry("_ZN2rt4cuda43_GLOBAL__N__26564614_10_softmax_cu_010f165c17forward_rows_warpILb0EfEEvllPKT0_"
                         "PS3_",
                         40));
  t.add_report("kernels/cuda/reduce_dims.cu",
               entry("_ZN2rt4cuda47_GLOBAL__N__ba21512b_14_reduce_dims_cu_6e06653911reduce_colsINS1_10MaxReducerI6__"
                     "halfEELi32ES4_NS1_8WriteMaxIS4_EEEEvlllPKT1_T2_",
                     32, 16896) +
                   entry("_ZN2rt4cuda47_GLOBAL__N__ba21512b_14_reduce_dims_cu_6e06653911reduce_colsINS1_10MaxReducerI6_"
                         "_halfEELi8ES4_NS1_8WriteMaxIS4_EEEEvlllPKT1_T2_",
                         38, 4224));
  t.add_report("kernels/cuda/batch_norm.cu",
               entry("_ZN2rt4cuda6detail21channel_partials_rowsINS0_46_GLOBAL__N__fd96e642_13_batch_norm_cu_0b9592c09"
                     "StatsFoldIfEELi4ENS1_11PartialSinkINS1_12WelfordStateIfEEEEEEvNS1_17ChannelReducePlanET_T1_",
                     44, 4096));
  t.add_report("kernels/cuda/elementwise.cu",
               entry("_ZN2rt4cuda47_GLOBAL__N__669893e7_14_elementwise_cu_46b8a3b37map_vecIfNS1_6AxpyOpIfEEEEvlNS1_"
                     "4PtrsIT_XsrT0_3kInEXsrS7_4kOutEEES7_",
                     28));
  t.add_report("kernels/cuda/grad_norm.cu", entry("_ZN2rt4cuda45_GLOBAL__N__e8b13eab_12_grad_norm_cu_b73acf9a12scale_"
                                                  "kernelIfEEvNS1_10ScaleBatchEPKd",
                                                  28));
  t.add_report("tests/cuda_emu/planted.cu",
               entry("_ZN2rt8emu_test43_GLOBAL__N__f782afc3_10_planted_cu_340bd4ea12scale_kernelEPKflPf", 26));
  t.add_report("lam.cu",
               entry("_ZN2rt4cuda38_GLOBAL__N__f68983b1_6_lam_cu_a88073d912apply_kernelIZNS0_3runEPffEUlfE_EEvS3_T_",
                     8) +
                   entry("_ZN2rt4cuda38_GLOBAL__N__f68983b1_6_lam_cu_a88073d99op_kernelIlLNS0_2OpE1ELj256EEEvPT_", 9));
  // One name in two namespaces; one header kernel in two .cu files, apart and alike.
  t.add_report("a.cu", entry("_ZN2rt4cuda12_GLOBAL__N_11kIfEEvv", 10) + entry("_ZN2rt4cuda6detail3finIfEEvv", 11) +
                           entry("_ZN2rt4cuda6detail4sameIfEEvv", 12));
  t.add_report("b.cu", entry("_ZN2rt4dist12_GLOBAL__N_11kIfEEvv", 20) + entry("_ZN2rt4cuda6detail3finIfEEvv", 21) +
                           entry("_ZN2rt4cuda6detail4sameIfEEvv", 12));
  return t;
}

// The registers of the kernel found, 0 for none.
int registers(const KernelTable& t, const std::string& instance, const std::string& file = "") {
  const KernelResources* k = t.find(instance, file);
  return k ? k->registers : 0;
}

TEST_CASE("GCC's names find nvcc's kernels") {
  const KernelTable t = table();
  REQUIRE(t.size() == 22);
  // unsigned int, long unsigned int (the demangler: unsigned long), {anonymous}.
  const KernelResources* k =
      t.find("rt::cuda::{anonymous}::transpose_kernel<unsigned int>", "kernels/cuda/relayout.cu");
  REQUIRE(k);
  CHECK(k->registers == 52);
  CHECK(k->static_shared_bytes == 4224);
  CHECK(registers(t, "rt::cuda::{anonymous}::transpose_kernel<long unsigned int>") == 48);
  CHECK(registers(t, "rt::cuda::{anonymous}::transpose_kernel<short unsigned int>") == 0);  // not in the report
  // long int against long; int.
  CHECK(registers(t, "rt::cuda::{anonymous}::fill_kernel<long int>", "kernels/cuda/fill.cu") == 24);
  CHECK(registers(t, "rt::cuda::{anonymous}::fill_kernel<int>", "kernels/cuda/fill.cu") == 20);
  // bool arguments.
  CHECK(registers(t, "rt::cuda::{anonymous}::forward_rows_warp<true, float>") == 39);
  CHECK(registers(t, "rt::cuda::{anonymous}::forward_rows_warp<false, float>") == 40);
  // A functor, an int (GCC: 32; the demangler: 32), deduced types.
  CHECK(registers(t, "rt::cuda::{anonymous}::reduce_cols<rt::cuda::{anonymous}::MaxReducer<__half>, 32, __half, "
                     "rt::cuda::{anonymous}::WriteMax<__half> >") == 32);
  CHECK(registers(t, "rt::cuda::{anonymous}::reduce_cols<rt::cuda::{anonymous}::MaxReducer<__half>, 8, __half, "
                     "rt::cuda::{anonymous}::WriteMax<__half> >") == 38);
  // A header's kernel (channel_reduce.cuh), its arguments fully qualified or relative.
  CHECK(registers(t, "rt::cuda::detail::channel_partials_rows<rt::cuda::{anonymous}::StatsFold<float>, 4, "
                     "rt::cuda::detail::PartialSink<rt::cuda::detail::WelfordState<float> > >",
                  "kernels/cuda/channel_reduce.cuh") == 44);
  CHECK(registers(t, "rt::cuda::detail::channel_partials_rows<rt::cuda::{anonymous}::StatsFold<float>, 4, "
                     "detail::PartialSink<detail::WelfordState<float> > >") == 44);
  CHECK(registers(t, "rt::cuda::{anonymous}::map_vec<float, rt::cuda::{anonymous}::AxpyOp<float> >") == 28);
  // A template and a plain function of one name in different files and namespaces.
  CHECK(registers(t, "rt::cuda::{anonymous}::scale_kernel<float>", "kernels/cuda/grad_norm.cu") == 28);
  CHECK(registers(t, "rt::emu_test::{anonymous}::scale_kernel", "tests/cuda_emu/planted.cu") == 26);
  // An extended __device__ lambda (nvcc names it like GCC's lambda), an enumerator (step 2:
  // the only op_kernel<long, ?, 256>).
  CHECK(registers(t, "rt::cuda::{anonymous}::apply_kernel<rt::cuda::run(float*, float)::<lambda(float)> >") == 8);
  CHECK(registers(t, "rt::cuda::{anonymous}::op_kernel<long int, rt::cuda::Op::Mul, 256>") == 9);
  CHECK(registers(t, "rt::cuda::{anonymous}::op_kernel<long int, rt::cuda::Op::Mul, 128>") == 0);
  CHECK(registers(t, "rt::cuda::{anonymous}::op_kernel<int, rt::cuda::Op::Mul, 256>") == 0);
  // Nothing of that name.
  CHECK(registers(t, "rt::cuda::{anonymous}::no_such_kernel<float>") == 0);
  CHECK(registers(t, "") == 0);
}

TEST_CASE("ambiguous names find nothing, unless the file, the scope or the resources decide") {
  const KernelTable t = table();
  // Dist::normal and Dist::uniform are both "an enum value" to step 2, and their kernels
  // differ: no guess. GCC's cast form (an out-of-range value) matches exactly.
  CHECK(registers(t, "rt::cuda::{anonymous}::random_kernel<rt::cuda::{anonymous}::Dist::normal, float>",
                  "kernels/cuda/random.cu") == 0);
  CHECK(registers(t, "rt::cuda::{anonymous}::random_kernel<(rt::cuda::{anonymous}::Dist)1, float>") == 32);
  // k<float> in rt::cuda (a.cu) and rt::dist (b.cu): the scope decides, and the file.
  CHECK(registers(t, "rt::cuda::{anonymous}::k<float>") == 10);
  CHECK(registers(t, "rt::dist::{anonymous}::k<float>") == 20);
  CHECK(registers(t, "rt::dist::{anonymous}::k<float>", "a.cu") == 10);
  CHECK(registers(t, "rt::other::k<float>") == 0);
  // A header's kernel compiled differently in two files: only the file decides; launched
  // from the header itself, it is ambiguous.
  CHECK(registers(t, "rt::cuda::detail::fin<float>", "a.cu") == 11);
  CHECK(registers(t, "rt::cuda::detail::fin<float>", "b.cu") == 21);
  CHECK(registers(t, "rt::cuda::detail::fin<float>", "kernels/cuda/channel_reduce.cuh") == 0);
  CHECK(registers(t, "rt::cuda::detail::fin<float>") == 0);
  // Compiled alike: either will do.
  CHECK(registers(t, "rt::cuda::detail::same<float>", "kernels/cuda/channel_reduce.cuh") == 12);
}

// ---- the emulated build ----------------------------------------------------------------------------

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What tools/cuda.bzl's ptxas_reports wrote for kernels/cuda (data of this test, in the
// runfiles where Bazel runs it): the .cu's path -> its report.
std::map<std::string, std::string> kernel_reports() {
  std::map<std::string, std::string> out;
  const std::filesystem::path dir = "kernels/cuda/_ptxas/cuda_ptxas";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();  // relayout.cu.txt
    out["kernels/cuda/" + name.substr(0, name.size() - 4)] = read(e.path());
  }
  return out;
}

TEST_CASE("the registry holds the reports of the kernels linked, as nvcc wrote them") {
  // Linking the launcher links relayout.cu's translation unit, and with it its report.
  volatile auto keep = &rt::cuda::transpose_batched;
  (void)keep;
  const KernelResources* k =
      rt::emu::kernel_resources("rt::cuda::{anonymous}::transpose_kernel<unsigned int>", "kernels/cuda/relayout.cu");
  REQUIRE(k);
  CHECK(k->registers == 52);
  CHECK(k->static_shared_bytes == 4224);
  CHECK(k->barriers == 1);
  CHECK(k->spill_store_bytes == 0);
  CHECK(k->source == "kernels/cuda/relayout.cu");
  CHECK(rt::emu::kernel_resources("rt::cuda::{anonymous}::transpose_kernel<unsigned int>", "") == k);
  CHECK(rt::emu::kernel_resources("rt::cuda::{anonymous}::transpose_kernel<float>", "kernels/cuda/relayout.cu") ==
        nullptr);

  const std::map<std::string, std::string> files = kernel_reports();
  int found = 0;
  for (const rt::emu::RegisteredReport& r : rt::emu::registered_ptxas_reports()) {
    const auto it = files.find(r.source);
    if (it == files.end()) continue;
    CHECK_MESSAGE(it->second == r.text, r.source);
    ++found;
  }
  CHECK(found >= 1);
  const std::vector<const KernelResources*> all = rt::emu::registered_kernels();
  CHECK(std::count(all.begin(), all.end(), k) == 1);
}

// GCC's name of every kernel instantiation launched in kernels/cuda: the __PRETTY_FUNCTION__
// strings of rt::emu::instance_name<&kernel> in the emulated objects (tests/cuda_emu/BUILD,
// kernel_instances), "file<TAB>name" a line.
std::vector<std::pair<std::string, std::string>> kernel_instances() {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(read("tests/cuda_emu/kernel_instances.txt"));
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

TEST_CASE("every kernel of kernels/cuda is found by the name GCC gives it") {
  KernelTable t;
  for (const auto& [source, text] : kernel_reports()) t.add_report(source, text);
  REQUIRE(t.size() > 700);

  // A sample, written as GCC prints them.
  const std::vector<std::pair<std::string, std::string>> sample = {
      {"rt::cuda::{anonymous}::transpose_kernel<unsigned int>",
       "void rt::cuda::(anonymous namespace)::transpose_kernel<unsigned int>(long, long, long, unsigned int const*, "
       "unsigned int*)"},
      {"rt::cuda::{anonymous}::map_vec<float, rt::cuda::{anonymous}::AxpyOp<float> >",
       "void rt::cuda::(anonymous namespace)::map_vec<float, rt::cuda::(anonymous namespace)::AxpyOp<float> >(long, "
       "rt::cuda::(anonymous namespace)::Ptrs<float, rt::cuda::(anonymous namespace)::AxpyOp<float>::kIn, "
       "rt::cuda::(anonymous namespace)::AxpyOp<float>::kOut>, rt::cuda::(anonymous namespace)::AxpyOp<float>)"},
      {"rt::cuda::{anonymous}::binary_broadcast_kernel<__half, unsigned int, rt::ew::Div>",
       "void rt::cuda::(anonymous namespace)::binary_broadcast_kernel<__half, unsigned int, rt::ew::Div>(unsigned "
       "int, rt::ew::BroadcastPlan, __half const*, __half const*, __half*)"},
      {"rt::cuda::{anonymous}::binary_backward_broadcast_kernel<float, long int, rt::ew::Div, false, true>",
       "void rt::cuda::(anonymous namespace)::binary_backward_broadcast_kernel<float, long, rt::ew::Div, false, "
       "true>(long, rt::ew::BroadcastPlan, float const*, float const*, float const*, float const*, float*, float*)"},
      {"rt::cuda::{anonymous}::reduce_cols<rt::cuda::{anonymous}::MaxReducer<__half>, 32, __half, "
       "rt::cuda::{anonymous}::WriteMax<__half> >",
       "void rt::cuda::(anonymous namespace)::reduce_cols<rt::cuda::(anonymous namespace)::MaxReducer<__half>, 32, "
       "__half, rt::cuda::(anonymous namespace)::WriteMax<__half> >(long, long, long, __half const*, "
       "rt::cuda::(anonymous namespace)::WriteMax<__half>)"},
      {"rt::cuda::detail::channel_partials_rows<rt::cuda::{anonymous}::StatsFold<float>, 4, "
       "rt::cuda::detail::PartialSink<rt::cuda::detail::WelfordState<float> > >",
       "void rt::cuda::detail::channel_partials_rows<rt::cuda::(anonymous namespace)::StatsFold<float>, 4, "
       "rt::cuda::detail::PartialSink<rt::cuda::detail::WelfordState<float> > >(rt::cuda::detail::ChannelReducePlan, "
       "rt::cuda::(anonymous namespace)::StatsFold<float>, "
       "rt::cuda::detail::PartialSink<rt::cuda::detail::WelfordState<float> >)"},
      {"rt::cuda::detail::channel_partials_rows<rt::cuda::{anonymous}::ColumnSumFold<double>, 2, "
       "rt::cuda::detail::OutSink<rt::cuda::{anonymous}::WriteColumn<double> > >",
       "void rt::cuda::detail::channel_partials_rows<rt::cuda::(anonymous namespace)::ColumnSumFold<double>, 2, "
       "rt::cuda::detail::OutSink<rt::cuda::(anonymous namespace)::WriteColumn<double> > "
       ">(rt::cuda::detail::ChannelReducePlan, rt::cuda::(anonymous namespace)::ColumnSumFold<double>, "
       "rt::cuda::detail::OutSink<rt::cuda::(anonymous namespace)::WriteColumn<double> >)"},
      {"rt::cuda::{anonymous}::forward_rows_warp<true, float>",
       "void rt::cuda::(anonymous namespace)::forward_rows_warp<true, float>(long, long, float const*, float*)"},
      {"rt::cuda::{anonymous}::fill_kernel<long int>",
       "void rt::cuda::(anonymous namespace)::fill_kernel<long>(long*, long, long)"},
      {"rt::cuda::{anonymous}::cast_kernel<unsigned char, float>",
       "void rt::cuda::(anonymous namespace)::cast_kernel<unsigned char, float>(long, unsigned char const*, float*)"},
      {"rt::cuda::multi_tensor_kernel<rt::cuda::{anonymous}::EmaOp<long int, float> >",
       "void rt::cuda::multi_tensor_kernel<rt::cuda::(anonymous namespace)::EmaOp<long, float> >(rt::cuda::MtaView, "
       "long, long, rt::cuda::(anonymous namespace)::EmaOp<long, float>)"},
      {"rt::cuda::{anonymous}::random_int_kernel",
       "rt::cuda::(anonymous namespace)::random_int_kernel(unsigned long, long, unsigned long, unsigned long, long*)"},
      {"rt::cuda::{anonymous}::dropout_kernel<__nv_bfloat16>",
       "void rt::cuda::(anonymous namespace)::dropout_kernel<__nv_bfloat16>(unsigned long, long, long, long, long, "
       "bool, double, double, __nv_bfloat16 const*, __nv_bfloat16*)"},
  };
  for (const auto& [gcc, demangled] : sample) {
    const KernelResources* k = t.find(gcc, "");
    CHECK_MESSAGE(k, gcc);
    if (k) CHECK_MESSAGE(k->demangled == demangled, gcc);
  }

  // Every name GCC gave a launched instantiation, by its launch's file (the .cu, or the .cu
  // holding the header's launch), is found in that file's report; but random.cu's
  // random_kernel<Dist, T>: GCC names the enumerator (Dist::normal), nvcc's name holds only
  // its value, and the two Dist kernels of one T differ, so its lookups find nothing
  // (Note [Kernel names across compilers]). A launch simt.h names without template arguments
  // ("(& rt::cuda::detail::channel_finalize)", not a name) finds nothing either.
  const std::set<std::string> ambiguous = {"random_kernel"};
  auto base = [](const std::string& key) { return key.substr(0, key.find('<')); };
  const std::vector<std::pair<std::string, std::string>> instances = kernel_instances();
  REQUIRE(instances.size() > 600);
  std::set<const KernelResources*> hit;
  for (const auto& [file, name] : instances) {
    const KernelResources* k = t.find(name, file);
    const std::string key = kernel_name_key(name);
    if (ambiguous.count(base(key)) || key.empty() || key.front() == '(') {
      CHECK_MESSAGE(k == nullptr, name);
      continue;
    }
    CHECK_MESSAGE(k, name, " (key ", key, ")");
    if (!k) continue;
    CHECK_MESSAGE(k->source == file, name);
    hit.insert(k);
  }

  // Every kernel nvcc reported is found by its demangled name (enum values numeric: step 1),
  // its key shared with no other kernel.
  for (size_t i = 0; i < t.size(); ++i) CHECK_MESSAGE(t.find(t[i].demangled, t[i].source) == &t[i], t[i].demangled);
  const std::string normal = "void rt::cuda::(anonymous namespace)::random_kernel<(rt::cuda::(anonymous "
                             "namespace)::Dist)1, float>(unsigned long, long, long, long, long, bool, double, double, "
                             "float*)";
  const KernelResources* k = t.find(normal, "kernels/cuda/random.cu");
  REQUIRE(k);
  CHECK(k->demangled == normal);

  // The kernels no GCC name found: their launches got no name from simt.h's instance_name
  // (said here, not a failure of the match).
  std::string unnamed;
  size_t n_unnamed = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (hit.count(&t[i]) || ambiguous.count(base(kernel_name_key(t[i].demangled)))) continue;
    ++n_unnamed;
    unnamed += "\n  " + t[i].demangled + " in " + t[i].source;
  }
  std::printf("%zu of %zu kernels of kernels/cuda found by GCC's names; %zu launched without one:%s\n", hit.size(),
              t.size(), n_unnamed, unnamed.c_str());
}

}  // namespace

#else
TEST_CASE("ptxas reports") { std::printf("SKIPPED: ptxas's reports are registered under --config=cuda-emu\n"); }
#endif
