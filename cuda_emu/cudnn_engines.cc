// The fake engines of the cuDNN fake (cudnn_engines.h): the list and its parser, support,
// workspace and numerics.
//
// Note [Engine list]
// RINGTAPE_EMU_CUDNN_ENGINES replaces the default list (read once, when a cuDNN handle or
// heuristics first need it; unset or empty: the default below). Engines are separated by ';',
// best first (heuristics mode A offers them in this order; an engine's global index is its
// position). Each is a name followed by space-separated key=value settings; lists inside a
// value are joined with '+'. "none" is the empty list (heuristics then offer nothing, and the
// engine's error says so).
//   ops=fwd+bwd_data+bwd_filter     operations it implements (default: all three)
//   dtypes=f32+f64+bf16+f16         data types (default: all four)
//   notes=tensor_core+down_convert_inputs+reduced_precision_reduction+fft+nondeterministic+
//         winograd+winograd_tile_4x4+winograd_tile_6x6+winograd_tile_13x13+strict_nan_prop
//                                   CUDNN_ATTR_ENGINE_NUMERICAL_NOTE (default: none)
//   behavior=runtime_compilation+requires_filter_int8x32_reorder+requires_bias_int8x32_reorder+
//            supports_cuda_graph_native_api+cublaslt_dependency
//                                   CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE (default: none)
//   layout=any|nchw|nhwc            the tensors' layout it takes (default: any)
//   channels=K                      channels-last tensors need C/groups and O/groups to be
//                                   multiples of K (default 1)
//   groups=any|1                    grouped convolutions or not (default: any)
//   align=B                         least byte alignment of every tensor (default: element size)
//   modes=a+fallback                heuristics modes that offer it (a: also B and INSTANT;
//                                   default: a)
//   ws_fixed=B ws_per_weight=B      workspace bytes: B + B' * O * C/groups * KH * KW (default 0)
//   fusions=scale_bias_relu+genstats
//                                   the fused graphs it runs (Note [Fused graphs the fake runs]
//                                   in cudnn_finalize.cc): a graph's fusions must all be listed
//                                   for heuristics to offer it (default: none, single
//                                   convolutions only); fused graphs need NHWC x and y
// e.g. RINGTAPE_EMU_CUDNN_ENGINES="fast notes=tensor_core dtypes=bf16 layout=nhwc channels=8;
//      slow modes=a+fallback ws_fixed=256"
//
// Note [Fake engine numerics]
// The notes decide how an engine computes (cudnn_conv.h):
//   down_convert_inputs           f32 inputs rounded to f16, f64 inputs to f32;
//   tensor_core (f32 data, FLOAT compute type)
//                                 inputs rounded to TF32;
//   reduced_precision_reduction, or a HALF/BFLOAT16 compute type
//                                 sums accumulated in the storage type, a rounding per addition;
//   nondeterministic              the reduction split in 4 partial sums added in an order that
//                                 changes from one execution to the next;
//   otherwise                     f32/f64 accumulated in double, bf16/f16 widened and
//                                 accumulated in float; one rounding to the storage type.
#include "cuda_emu/cudnn_engines.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <sstream>

namespace rt::emu::cudnn {
namespace {

// Note [Default engines]
// A list shaped like real cuDNN's for a convolution: tensor-core engines first (NHWC,
// channel multiples, 16-byte alignment, no groups), one that reduces in reduced precision, a
// runtime-compiled one (the only one that runs fused graphs, as in cuDNN, where runtime
// fusion engines compile them), a down-converting one, a non-deterministic split-K weight gradient,
// and a generic FMA engine that takes everything (and is the fallback list). Every engine
// asks for workspace, so that too little of it is caught.
constexpr const char* kDefaultEngines =
    "tc_implicit_gemm notes=tensor_core dtypes=f32+bf16+f16 layout=nhwc channels=8 groups=1 align=16 ws_fixed=4096;"
    "tc_implicit_gemm_rpr notes=tensor_core+reduced_precision_reduction dtypes=bf16+f16 ws_fixed=2048 "
    "ws_per_weight=4;"
    "tc_runtime_compiled notes=tensor_core behavior=runtime_compilation+supports_cuda_graph_native_api "
    "dtypes=f32+bf16+f16 layout=nhwc channels=4 groups=1 ws_fixed=1024 fusions=scale_bias_relu+genstats;"
    "tc_down_convert notes=tensor_core+down_convert_inputs dtypes=f32 ws_fixed=8192;"
    "wgrad_split_k ops=bwd_filter notes=nondeterministic ws_per_weight=16;"
    "implicit_gemm_fma modes=a+fallback ws_fixed=256 ws_per_weight=8";

constexpr const char* kNumericalNames[] = {"tensor_core",       "down_convert_inputs", "reduced_precision_reduction",
                                           "fft",               "nondeterministic",    "winograd",
                                           "winograd_tile_4x4", "winograd_tile_6x6",   "winograd_tile_13x13",
                                           "strict_nan_prop"};
static_assert(std::size(kNumericalNames) == CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
constexpr const char* kBehaviorNames[] = {"runtime_compilation", "requires_filter_int8x32_reorder",
                                          "requires_bias_int8x32_reorder", "supports_cuda_graph_native_api",
                                          "cublaslt_dependency"};
static_assert(std::size(kBehaviorNames) == CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
constexpr const char* kOpNames[] = {"fwd", "bwd_data", "bwd_filter"};
constexpr const char* kDtypeNames[] = {"f32", "f64", "bf16", "f16"};
constexpr const char* kModeNames[] = {"a", "fallback"};
constexpr const char* kFusionNames[] = {"scale_bias_relu", "genstats"};  // bit i: kFuse*

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

template <size_t N>
std::string choices(const char* const (&names)[N]) {
  std::string s;
  for (size_t i = 0; i < N; ++i) s += (i ? "+" : "") + std::string(names[i]);
  return s;
}

// "a+b" over `names` as a list of indices; false and *error on a name not among them.
template <size_t N>
bool parse_set(const std::string& key, const std::string& value, const char* const (&names)[N],
               std::vector<int>* out, std::string* error) {
  out->clear();
  for (const std::string& part : split(value, '+')) {
    const auto it = std::find(std::begin(names), std::end(names), part);
    if (it == std::end(names)) {
      *error = key + "=" + value + ": '" + part + "' is not one of " + choices(names);
      return false;
    }
    out->push_back(int(it - std::begin(names)));
  }
  return true;
}

bool parse_count(const std::string& key, const std::string& value, int64_t lo, int64_t* out, std::string* error) {
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end || v < lo) {
    *error = key + "=" + value + ": want an integer >= " + std::to_string(lo);
    return false;
  }
  *out = v;
  return true;
}

bool parse_engine(const std::string& text, EngineSpec* e, std::string* error) {
  const std::vector<std::string> w = words(text);
  e->name = w[0];
  if (e->name.find('=') != std::string::npos) {
    *error = "'" + text + "' starts with a setting; each engine starts with its name";
    return false;
  }
  for (size_t i = 1; i < w.size(); ++i) {
    const size_t eq = w[i].find('=');
    const std::string key = w[i].substr(0, eq), value = eq == std::string::npos ? "" : w[i].substr(eq + 1);
    if (eq == std::string::npos || value.empty()) {
      *error = "'" + w[i] + "' is not key=value";
      return false;
    }
    std::vector<int> set;
    auto bits = [&set] {
      uint8_t b = 0;
      for (int i : set) b = uint8_t(b | (1 << i));
      return b;
    };
    if (key == "ops") {
      if (!parse_set(key, value, kOpNames, &set, error)) return false;
      e->ops = bits();
    } else if (key == "dtypes") {
      if (!parse_set(key, value, kDtypeNames, &set, error)) return false;
      e->dtypes = bits();
    } else if (key == "notes") {
      if (!parse_set(key, value, kNumericalNames, &set, error)) return false;
      for (int n : set) e->numerical.push_back(cudnnBackendNumericalNote_t(n));
    } else if (key == "behavior") {
      if (!parse_set(key, value, kBehaviorNames, &set, error)) return false;
      for (int n : set) e->behavior.push_back(cudnnBackendBehaviorNote_t(n));
    } else if (key == "modes") {
      if (!parse_set(key, value, kModeNames, &set, error)) return false;
      e->modes = bits();
    } else if (key == "fusions") {
      if (!parse_set(key, value, kFusionNames, &set, error)) return false;
      e->fusions = bits();
    } else if (key == "layout") {
      if (value != "any" && value != "nchw" && value != "nhwc") {
        *error = "layout=" + value + ": want any, nchw or nhwc";
        return false;
      }
      e->layout = value == "any" ? Layout::any : value == "nchw" ? Layout::nchw : Layout::nhwc;
    } else if (key == "groups") {
      if (value != "any" && value != "1") {
        *error = "groups=" + value + ": want any or 1";
        return false;
      }
      e->grouped = value == "any";
    } else if (key == "channels") {
      if (!parse_count(key, value, 1, &e->channels, error)) return false;
    } else if (key == "align") {
      if (!parse_count(key, value, 1, &e->align, error)) return false;
    } else if (key == "ws_fixed") {
      if (!parse_count(key, value, 0, &e->ws_fixed, error)) return false;
    } else if (key == "ws_per_weight") {
      if (!parse_count(key, value, 0, &e->ws_per_weight, error)) return false;
    } else {
      *error = "unknown key '" + key +
               "' (keys: ops, dtypes, notes, behavior, layout, channels, groups, align, modes, ws_fixed, "
               "ws_per_weight, fusions)";
      return false;
    }
  }
  return true;
}

struct Active {
  std::mutex mu;
  std::shared_ptr<const EngineList> list;
  std::string error;
  std::string last_executed;
};

Active& active() {
  static auto* a = new Active();  // leaked: plans may be executed from static destructors
  return *a;
}

// Under active().mu: the environment's list, or the default one.
void load_from_environment(Active& a) {
  auto list = std::make_shared<EngineList>();
  a.error.clear();
  const char* v = std::getenv("RINGTAPE_EMU_CUDNN_ENGINES");
  std::string error;
  if (v && *v) {
    if (!parse_engines(v, list.get(), &error)) {
      a.error = std::string("RINGTAPE_EMU_CUDNN_ENGINES='") + v + "' is not an engine list: " + error +
                " (the syntax: Note [Engine list] in cuda_emu/cudnn_engines.cc; unset it for the default list)";
      list->engines.clear();
    }
  } else if (!parse_engines(kDefaultEngines, list.get(), &error)) {
    a.error = "the default engine list does not parse: " + error;  // a bug in this file
  }
  a.list = std::move(list);
}

bool dtype_bit(cudnnDataType_t t, uint8_t mask) {
  switch (t) {
    case CUDNN_DATA_FLOAT:
      return mask & 1;
    case CUDNN_DATA_DOUBLE:
      return mask & 2;
    case CUDNN_DATA_BFLOAT16:
      return mask & 4;
    case CUDNN_DATA_HALF:
      return mask & 8;
    default:
      return false;
  }
}

const char* dtype_str(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT:
      return "f32";
    case CUDNN_DATA_DOUBLE:
      return "f64";
    case CUDNN_DATA_BFLOAT16:
      return "bf16";
    case CUDNN_DATA_HALF:
      return "f16";
    default:
      return "a type the fake does not compute in";
  }
}

Support no(cudnnStatus_t s, const EngineSpec& e, const std::string& why) {
  return {s, "engine " + e.name + " does not support this convolution: " + why};
}

}  // namespace

std::string fusion_names(uint8_t fusions) {
  std::string s;
  for (size_t i = 0; i < std::size(kFusionNames); ++i)
    if (fusions & (1 << i)) s += (s.empty() ? "" : "+") + std::string(kFusionNames[i]);
  return s;
}

bool EngineSpec::has(cudnnBackendNumericalNote_t n) const {
  return std::find(numerical.begin(), numerical.end(), n) != numerical.end();
}
bool EngineSpec::has(cudnnBackendBehaviorNote_t n) const {
  return std::find(behavior.begin(), behavior.end(), n) != behavior.end();
}

bool parse_engines(const std::string& text, EngineList* out, std::string* error) {
  out->engines.clear();
  if (words(text) == std::vector<std::string>{"none"}) return true;
  const std::vector<std::string> parts = split(text, ';');
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (words(part).empty()) {
      if (i + 1 == parts.size() && i > 0) continue;  // a trailing ';'
      *error = parts.size() == 1 ? "no engine (write 'none' for an empty list)" : "an empty engine between two ';'";
      return false;
    }
    EngineSpec e;
    if (!parse_engine(part, &e, error)) {
      *error = "engine '" + words(part)[0] + "': " + *error;
      return false;
    }
    for (const EngineSpec& o : out->engines)
      if (o.name == e.name) {
        *error = "engine '" + e.name + "' is listed twice; give each engine its own name";
        return false;
      }
    out->engines.push_back(std::move(e));
  }
  return true;
}

std::shared_ptr<const EngineList> engines() {
  Active& a = active();
  std::lock_guard<std::mutex> g(a.mu);
  if (!a.list) load_from_environment(a);
  return a.list;
}

std::string engine_list_error() {
  Active& a = active();
  std::lock_guard<std::mutex> g(a.mu);
  if (!a.list) load_from_environment(a);
  return a.error;
}

const char* default_engine_list() { return kDefaultEngines; }

std::string set_engines(const std::string& text) {
  auto list = std::make_shared<EngineList>();
  std::string error;
  if (!parse_engines(text, list.get(), &error)) return error;
  Active& a = active();
  std::lock_guard<std::mutex> g(a.mu);
  a.list = std::move(list);
  a.error.clear();
  return "";
}

void reset_engines() {
  Active& a = active();
  std::lock_guard<std::mutex> g(a.mu);
  load_from_environment(a);
}

std::string last_engine_executed() {
  Active& a = active();
  std::lock_guard<std::mutex> g(a.mu);
  return a.last_executed;
}

void note_engine_executed(const std::string& name) {
  Active& a = active();
  std::lock_guard<std::mutex> g(a.mu);
  a.last_executed = name;
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::any:
      return "any";
    case Layout::nchw:
      return "NCHW";
    case Layout::nhwc:
      return "NHWC";
    case Layout::other:
      return "neither NCHW nor NHWC";
  }
  return "?";
}

Layout layout_of(const int64_t* dims, const int64_t* strides) {
  if (dims[1] == 1) return Layout::any;
  int smaller = 0, larger = 0;  // spatial dims (extent > 1) with a smaller / larger stride than C's
  for (int i = 2; i < 4; ++i)
    if (dims[i] > 1) (strides[i] < strides[1] ? smaller : larger) += 1;
  if (larger == 0) return smaller == 0 ? Layout::any : Layout::nchw;
  return smaller == 0 ? Layout::nhwc : Layout::other;  // other: C between H and W
}

bool offered(const EngineSpec& e, const ConvCase& c, cudnnBackendHeurMode_t mode) {
  const uint8_t want = mode == CUDNN_HEUR_MODE_FALLBACK ? 2 : 1;
  return (e.modes & want) && (e.ops & (1 << int(c.p.op))) && dtype_bit(c.p.dtype, e.dtypes) &&
         (c.fusions & ~e.fusions) == 0;
}

// Note [Fake engine support]
// The checks, in this order, each with the status real engines give for it.
Support supports(const EngineSpec& e, const ConvCase& c) {
  const ConvProblem& p = c.p;
  if (c.spatial_dims > 2)
    return no(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, e, "3-D convolutions are not emulated (1-D and 2-D are)");
  if (!(e.ops & (1 << int(p.op))))
    return no(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, e, std::string("it does not implement ") + conv_op_name(p.op));
  if (const uint8_t missing = uint8_t(c.fusions & ~e.fusions))
    return no(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, e,
              "the graph fuses " + fusion_names(c.fusions) + " and the engine does not run " +
                  fusion_names(missing) + " (engine list key fusions=; Note [Engine list]); pick an engine that "
                  "lists it, or run the convolution unfused");
  auto nhwc_or_any = [](Layout l) { return l == Layout::nhwc || l == Layout::any; };
  if (c.fusions && !(nhwc_or_any(c.layouts[0]) && nhwc_or_any(c.layouts[2])))
    return no(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, e,
              std::string("fused graphs run on NHWC tensors only (as cuDNN's runtime fusion engines), x is ") +
                  layout_name(c.layouts[0]) + " and y " + layout_name(c.layouts[2]) +
                  "; give x and y channels-last strides");
  if (c.dtypes[0] != c.dtypes[1] || c.dtypes[1] != c.dtypes[2])
    return no(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, e,
              std::string("x is ") + dtype_str(c.dtypes[0]) + ", w " + dtype_str(c.dtypes[1]) + ", y " +
                  dtype_str(c.dtypes[2]) + ": give the three tensors one data type");
  if (!dtype_bit(p.dtype, e.dtypes))
    return no(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, e, std::string("it does not take ") + dtype_str(p.dtype));
  const bool half = p.dtype == CUDNN_DATA_HALF || p.dtype == CUDNN_DATA_BFLOAT16;
  const bool storage_compute = half && c.compute == p.dtype;
  const cudnnDataType_t want = p.dtype == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  if (c.compute != want && !(storage_compute && e.has(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)))
    return no(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, e,
              std::string("compute type ") + dtype_str(c.compute) + " with " + dtype_str(p.dtype) + " data (use " +
                  dtype_str(want) + (half ? ", or the storage type on a reduced-precision-reduction engine" : "") +
                  ")");
  const char* names[] = {"x", "w", "y"};
  for (int i = 0; i < 3; ++i)
    if (e.layout != Layout::any && c.layouts[size_t(i)] != Layout::any && c.layouts[size_t(i)] != e.layout)
      return no(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, e,
                std::string(names[i]) + " is " + layout_name(c.layouts[size_t(i)]) + "; it takes " +
                    layout_name(e.layout) + " only");
  const int64_t Cg = p.C / p.groups, Og = p.O / p.groups;
  const bool channels_last = c.layouts[0] == Layout::nhwc || c.layouts[2] == Layout::nhwc;
  if (e.channels > 1 && channels_last && (Cg % e.channels || Og % e.channels))
    return no(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, e,
              "in NHWC it needs input and output channels per group that are multiples of " +
                  std::to_string(e.channels) + ", got " + std::to_string(Cg) + " and " + std::to_string(Og));
  if (!e.grouped && p.groups > 1)
    return no(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, e, "grouped convolutions (groups " + std::to_string(p.groups) + ")");
  const int64_t align = e.align ? e.align : int64_t(dtype_size(p.dtype));
  if (c.alignment < align)
    return no(CUDNN_STATUS_NOT_SUPPORTED, e,
              "it needs tensors aligned to " + std::to_string(align) + " bytes, the descriptors promise " +
                  std::to_string(c.alignment));
  return {};
}

int64_t workspace_bytes(const EngineSpec& e, const ConvCase& c) {
  const ConvProblem& p = c.p;
  return e.ws_fixed + e.ws_per_weight * p.O * (p.C / p.groups) * p.KH * p.KW;
}

// How an engine computes, from its notes (Note [Fake engine numerics]).
Numerics numerics_of(const EngineSpec& e, const ConvCase& c, uint64_t rotation) {
  Numerics n;
  const cudnnDataType_t t = c.p.dtype;
  if (e.has(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) && (t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_DOUBLE))
    n.input = Numerics::Input::down_convert;
  else if (e.has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE) && t == CUDNN_DATA_FLOAT && c.compute == CUDNN_DATA_FLOAT)
    n.input = Numerics::Input::tf32;
  n.storage_accumulation = e.has(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) ||
                           ((t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16) && c.compute == t);
  if (e.has(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) {
    n.splits = 4;
    n.rotation = rotation;
  }
  return n;
}

}  // namespace rt::emu::cudnn
