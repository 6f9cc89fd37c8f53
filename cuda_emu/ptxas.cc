// ptxas's reports of the .cu files (tools/cuda.bzl appends one to each under the cuda-emu
// configs): their registry, their parse, and the match of a launch's kernel to one of their
// entries (Note [Kernel names across compilers]).
#include "cuda_emu/ptxas.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>

namespace rt::emu {

// Note [Kernel names across compilers]
// A launch knows its kernel by the name GCC prints for the instantiation (instance_name in
// simt.h, through __PRETTY_FUNCTION__); ptxas's report knows it by nvcc's device-side
// mangled name, demangled here by abi::__cxa_demangle. The two spell one instantiation
// differently:
//   GCC                                      the demangler
//   rt::cuda::{anonymous}::k<T>              void rt::cuda::(anonymous namespace)::k<T>(params)
//   long int, long unsigned int, short int   long, unsigned long, short
//   const float*                             float const*
//   256 (an unsigned argument), -3, 'A'      256u, -3l, (char)65
//   detail::Foo<T> (relative to the scope)   rt::cuda::detail::Foo<T>
//   rt::cuda::<unnamed>::Op::add             (rt::cuda::(anonymous namespace)::Op)0
//   f(float*)::<lambda(float)>               f(float*)::{lambda(float)#1}
// (nvcc 13 names an extended __device__ lambda's kernel like a plain lambda's; its
// __nv_dl_wrapper_t is the host side's.) Both names are brought to one spelling: the return
// type and the parameter list dropped; every qualifier dropped, of the kernel and of its
// arguments (namespaces, enclosing classes and functions: GCC's relative names and the
// demangler's full ones agree only on the last component), the kernel's own kept aside as
// its scope with anonymous namespaces written one way; const, volatile, struct/class/enum
// and spaces dropped; the builtin integer types written one way (ulong, llong, ...);
// integer suffixes and casts to integer types dropped, character literals as numbers; a
// lambda as lambda(its parameters). What remains, "k<ulong,256>", is the key. A launch's
// kernel is looked for in two steps, the first with a candidate deciding:
//   1. the reports' kernels with the same key;
//   2. the same function name and number of template arguments, an argument matching if
//      equal or if either side is a lambda or an enum value (a cast to a non-integer type
//      in the demangler's name, where GCC names the enumerator: nothing here maps one to
//      the other).
// Of the candidates, those in the report of the launch's own file (the .cu, where the launch
// is written in it) are kept if there are any, then of those the ones of the same scope if
// there are any. A launch written in a header (channel_reduce.cuh) narrows nothing by its
// file: its kernel is compiled in every .cu including the header, whose copies must then
// agree. If the candidates left do not all have the same resources the answer is nullptr, as
// when there is none, and the lab says "unknown" rather than show another kernel's
// registers. So kernels differing only in an enum argument, with different resources, are
// unknown by GCC's name (random.cu's random_kernel<Dist, T>); a demangled name, its enum
// values numeric, finds them in step 1. The normal forms lose information (kernels differing
// only in a qualifier or the constness of an argument share a key), which can make a lookup
// ambiguous but never picks a kernel whose name differs in what remains; step 2 relies on
// every kernel GCC instantiates being in the report too, as both compile the same source.

namespace {

// ---- the names ------------------------------------------------------------------------------

// A name as a tree: identifiers, numbers, punctuation, and bracketed groups.
struct Node {
  enum Kind { ident, number, charlit, punct, anon, lambda, group } kind = punct;
  std::string text;  // ident, number, charlit (with quotes), punct; lambda: its parameter list
  char open = 0;     // group: '<', '(' or '['
  std::vector<Node> kids;
};

bool starts_with(std::string_view s, size_t at, std::string_view prefix) {
  return s.size() - at >= prefix.size() && s.compare(at, prefix.size(), prefix) == 0;
}
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

// Where the bracket opened at `at` closes (its index), counting only that kind of bracket
// and parentheses inside it; s.size() if it does not.
size_t matching(std::string_view s, size_t at) {
  const char open = s[at], close = open == '(' ? ')' : open == '{' ? '}' : open == '[' ? ']' : '>';
  int depth = 0, parens = 0;
  for (size_t i = at; i < s.size(); ++i) {
    if (open != '(' && s[i] == '(') ++parens;
    else if (open != '(' && s[i] == ')') --parens;
    else if (s[i] == open && parens == 0) ++depth;
    else if (s[i] == close && parens == 0 && --depth == 0) return i;
  }
  return s.size();
}

// Parses s from `pos` up to the `close` bracket (consumed) or the end.
std::vector<Node> parse_seq(std::string_view s, size_t& pos, char close) {
  std::vector<Node> out;
  while (pos < s.size()) {
    const char c = s[pos];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++pos;
    } else if (starts_with(s, pos, "(anonymous namespace)") || starts_with(s, pos, "{anonymous}") ||
               starts_with(s, pos, "<unnamed>")) {
      out.push_back({Node::anon, "{anon}", 0, {}});
      pos += s[pos] == '(' ? 21 : s[pos] == '{' ? 11 : 9;
    } else if (starts_with(s, pos, "{lambda(") || starts_with(s, pos, "<lambda(")) {
      // GCC's <lambda(float)>, the demangler's {lambda(float)#1}: the parameters are kept.
      const size_t params = pos + 7, params_end = matching(s, params);
      Node n{Node::lambda, std::string(s.substr(params + 1, std::min(params_end, s.size()) - params - 1)), 0, {}};
      out.push_back(std::move(n));
      pos = std::min(matching(s, pos), s.size() - 1) + 1;
    } else if (c == '{') {  // {unnamed type#1} and the like: one opaque name
      const size_t end = std::min(matching(s, pos), s.size() - 1);
      out.push_back({Node::ident, std::string(s.substr(pos, end + 1 - pos)), 0, {}});
      pos = end + 1;
    } else if (c == '<' || c == '(' || c == '[') {
      ++pos;
      Node g{Node::group, "", c, {}};
      g.kids = parse_seq(s, pos, c == '<' ? '>' : c == '(' ? ')' : ']');
      out.push_back(std::move(g));
    } else if (c == close) {
      ++pos;
      return out;
    } else if (c == ':' && starts_with(s, pos, "::")) {
      out.push_back({Node::punct, "::", 0, {}});
      pos += 2;
    } else if (c == '\'') {
      size_t end = pos + 1;
      while (end < s.size() && s[end] != '\'') end += s[end] == '\\' ? 2 : 1;
      end = std::min(end, s.size() - 1);
      out.push_back({Node::charlit, std::string(s.substr(pos, end + 1 - pos)), 0, {}});
      pos = end + 1;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = pos;
      while (end < s.size() && (is_ident_char(s[end]) || s[end] == '.')) ++end;
      out.push_back({Node::number, std::string(s.substr(pos, end - pos)), 0, {}});
      pos = end;
    } else if (is_ident_char(c)) {
      size_t end = pos;
      while (end < s.size() && is_ident_char(s[end])) ++end;
      out.push_back({Node::ident, std::string(s.substr(pos, end - pos)), 0, {}});
      pos = end;
    } else {
      out.push_back({Node::punct, std::string(1, c), 0, {}});
      ++pos;
    }
  }
  return out;
}

std::vector<Node> parse_name_tree(std::string_view s) {
  size_t pos = 0;
  std::vector<Node> out;
  while (pos < s.size()) {  // a stray closing bracket ends parse_seq early: keep going
    std::vector<Node> part = parse_seq(s, pos, '\0');
    for (Node& n : part) out.push_back(std::move(n));
  }
  return out;
}

bool is_group(const Node& n, char open) { return n.kind == Node::group && n.open == open; }
bool is_unit_name(const Node& n) { return n.kind == Node::ident || n.kind == Node::anon || n.kind == Node::lambda; }

// The nodes with every qualifier ("a::", "S<3>::", "f<int>()::") removed.
std::vector<const Node*> drop_qualifiers(const std::vector<Node>& seq) {
  std::vector<const Node*> out;
  for (const Node& n : seq) {
    if (n.kind != Node::punct || n.text != "::") {
      out.push_back(&n);
      continue;
    }
    // A function scope may end in const ("f() const::<lambda()>").
    while (!out.empty() && out.back()->kind == Node::ident && out.back()->text == "const") out.pop_back();
    if (!out.empty() && is_group(*out.back(), '(')) out.pop_back();
    if (!out.empty() && is_group(*out.back(), '<')) out.pop_back();
    if (!out.empty() && is_unit_name(*out.back())) out.pop_back();
  }
  return out;
}

bool is_builtin_word(const std::string& w) {
  return w == "signed" || w == "unsigned" || w == "short" || w == "long" || w == "int" || w == "char" ||
         w == "double";
}

// One spelling of a run of builtin type words ("long unsigned int" and "unsigned long" are ulong).
std::string builtin_type(const std::vector<std::string>& words) {
  int longs = 0;
  bool is_unsigned = false, is_signed = false, is_short = false, is_char = false, is_double = false;
  for (const std::string& w : words) {
    longs += w == "long";
    is_unsigned |= w == "unsigned";
    is_signed |= w == "signed";
    is_short |= w == "short";
    is_char |= w == "char";
    is_double |= w == "double";
  }
  const std::string u = is_unsigned ? "u" : "";
  if (is_double) return longs ? "ldouble" : "double";
  if (is_char) return is_unsigned ? "uchar" : is_signed ? "schar" : "char";
  if (is_short) return u + "short";
  if (longs >= 2) return u + "llong";
  if (longs == 1) return u + "long";
  return is_unsigned ? "unsigned" : "int";
}

// Words one compiler writes and the other does not, or in another place.
bool is_dropped_word(const std::string& w) {
  return w == "const" || w == "volatile" || w == "struct" || w == "class" || w == "enum" || w == "union" ||
         w == "typename" || w == "__restrict__" || w == "__restrict";
}

bool is_integer_type(const std::string& t) {
  static const char* const kTypes[] = {"char",   "schar", "uchar",    "short",   "ushort",   "int",
                                       "unsigned", "long", "ulong",   "llong",   "ullong",   "bool",
                                       "wchar_t", "char8_t", "char16_t", "char32_t"};
  for (const char* k : kTypes) {
    if (t == k) return true;
  }
  return false;
}

// The value of a character literal as GCC prints it ('A', '\n', '\000', '\x41'), as digits.
std::string char_value(const std::string& lit) {
  const std::string in = lit.size() >= 2 ? lit.substr(1, lit.size() - 2) : lit;
  long v = 0;
  if (in.size() == 1) {
    v = static_cast<unsigned char>(in[0]);
  } else if (in.size() >= 2 && in[0] == '\\') {
    const char e = in[1];
    if (e >= '0' && e <= '7') v = std::strtol(in.c_str() + 1, nullptr, 8);
    else if (e == 'x') v = std::strtol(in.c_str() + 2, nullptr, 16);
    else if (e == 'n') v = '\n';
    else if (e == 't') v = '\t';
    else if (e == 'r') v = '\r';
    else if (e == 'a') v = '\a';
    else if (e == 'b') v = '\b';
    else if (e == 'f') v = '\f';
    else if (e == 'v') v = '\v';
    else v = static_cast<unsigned char>(e);  // \\ \' \"
  } else {
    return lit;
  }
  return std::to_string(v);
}

void append(std::string& out, const std::string& piece) {
  if (piece.empty()) return;
  if (!out.empty() && is_ident_char(out.back()) && is_ident_char(piece.front())) out += ' ';
  out += piece;
}

std::string render(const std::vector<Node>& seq, bool& wildcard);

// The comma-separated parts of a group, each rendered; `wildcards` (optional) gets each
// part's flag, `wildcard` the flag of any part.
std::vector<std::string> render_list(const std::vector<Node>& kids, bool& wildcard,
                                     std::vector<bool>* wildcards = nullptr) {
  std::vector<std::string> parts;
  std::vector<Node> part;
  auto flush = [&] {
    bool w = false;
    parts.push_back(render(part, w));
    if (wildcards) wildcards->push_back(w);
    wildcard |= w;
    part.clear();
  };
  for (const Node& n : kids) {
    if (n.kind == Node::punct && n.text == ",") flush();
    else part.push_back(n);
  }
  if (!part.empty() || !parts.empty()) flush();
  return parts;
}

std::string join(const std::vector<std::string>& parts, char open, char close) {
  std::string out(1, open);
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "," : "") + parts[i];
  return out + close;
}

// One spelling of a type or template argument (Note [Kernel names across compilers]).
std::string render(const std::vector<Node>& seq, bool& wildcard) {
  const std::vector<const Node*> items = drop_qualifiers(seq);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const Node& n = *items[i];
    switch (n.kind) {
      case Node::ident: {
        if (is_builtin_word(n.text)) {
          std::vector<std::string> words;
          while (i < items.size() && items[i]->kind == Node::ident && is_builtin_word(items[i]->text)) {
            words.push_back(items[i++]->text);
          }
          --i;
          append(out, builtin_type(words));
        } else if (!is_dropped_word(n.text)) {
          if (n.text.find("__nv_dl_") != std::string::npos || n.text.find("__nv_hdl_") != std::string::npos) {
            wildcard = true;  // nvcc's wrappers of extended lambdas, should a name ever show them
          }
          append(out, n.text);
        }
        break;
      }
      case Node::number: {
        std::string v = n.text;
        const bool hex = v.size() > 1 && (v[1] == 'x' || v[1] == 'X');
        while (!hex && v.size() > 1 && std::strchr("uUlL", v.back())) v.pop_back();
        append(out, v);
        break;
      }
      case Node::charlit:
        append(out, char_value(n.text));
        break;
      case Node::anon:
        append(out, "{anon}");
        break;
      case Node::lambda: {
        wildcard = true;
        bool ignored = false;
        const std::vector<Node> params = parse_name_tree(n.text);
        append(out, "lambda" + join(render_list(params, ignored), '(', ')'));
        break;
      }
      case Node::group: {
        bool inner = false;
        const std::vector<std::string> parts = render_list(n.kids, inner);
        const bool value_follows =
            i + 1 < items.size() &&
            (items[i + 1]->kind == Node::number || items[i + 1]->kind == Node::charlit ||
             (items[i + 1]->kind == Node::punct && items[i + 1]->text == "-" && i + 2 < items.size() &&
              items[i + 2]->kind == Node::number));
        const bool after_name = i > 0 && (is_unit_name(*items[i - 1]) || items[i - 1]->kind == Node::group);
        if (n.open == '(' && value_follows && !after_name && parts.size() == 1) {
          // The demangler's cast of a template argument's value: (char)65, (rt::cuda::Op)3.
          if (!is_integer_type(parts[0])) {
            wildcard = true;  // an enum value: GCC names the enumerator instead
            append(out, "(" + parts[0] + ")");
          }
          break;
        }
        wildcard |= inner;
        append(out, join(parts, n.open, n.open == '<' ? '>' : n.open == '(' ? ')' : ']'));
        break;
      }
      case Node::punct:
        append(out, n.text);
        break;
    }
  }
  return out;
}

// A qualifier as the scope keeps it.
std::string render_unit(const std::vector<const Node*>& unit) {
  std::string out;
  for (const Node* n : unit) {
    bool ignored = false;
    if (n->kind == Node::group) out += render({*n}, ignored);
    else if (n->kind == Node::anon) out += "{anon}";
    else if (n->kind == Node::lambda) out += "lambda";
    else out += n->text;
  }
  return out;
}

KernelTable::Name parse_name(std::string_view name) {
  KernelTable::Name r;
  const std::vector<Node> tree = parse_name_tree(name);
  size_t end = tree.size();
  if (end > 0 && is_group(tree[end - 1], '(')) --end;  // the demangler's parameter list
  // The last unit: a name and its template arguments.
  size_t at = end;
  const Node* args = nullptr;
  if (at > 0 && is_group(tree[at - 1], '<')) args = &tree[--at];
  if (at == 0 || !is_unit_name(tree[at - 1])) {  // not a name: all of it is the key
    bool ignored = false;
    r.base = r.key = render(tree, ignored);
    return r;
  }
  const Node& base = tree[--at];
  r.base = base.kind == Node::lambda ? "lambda" : base.kind == Node::anon ? "{anon}" : base.text;
  // The scope: the qualifiers before it ("a::", "S<3>::", "f(int)::").
  std::vector<std::string> scope;
  while (at > 0 && tree[at - 1].kind == Node::punct && tree[at - 1].text == "::") {
    --at;
    std::vector<const Node*> unit;
    while (at > 0 && (tree[at - 1].kind == Node::group || (tree[at - 1].kind == Node::ident &&
                                                            tree[at - 1].text == "const"))) {
      unit.insert(unit.begin(), &tree[--at]);
    }
    if (at > 0 && is_unit_name(tree[at - 1])) unit.insert(unit.begin(), &tree[--at]);
    scope.insert(scope.begin(), render_unit(unit));
  }
  for (size_t i = 0; i < scope.size(); ++i) r.scope += (i ? "::" : "") + scope[i];
  r.key = r.base;
  if (args) {
    r.is_template = true;
    bool any = false;
    r.args = render_list(args->kids, any, &r.wildcard);
    r.key += join(r.args, '<', '>');
  }
  return r;
}

bool same_resources(const KernelResources& a, const KernelResources& b) {
  return a.registers == b.registers && a.static_shared_bytes == b.static_shared_bytes &&
         a.spill_store_bytes == b.spill_store_bytes && a.spill_load_bytes == b.spill_load_bytes &&
         a.stack_frame_bytes == b.stack_frame_bytes && a.barriers == b.barriers;
}

// ---- the report -------------------------------------------------------------------------------

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The first number of "used 1 barriers", "4224 bytes smem"; -1 if none.
int first_number(std::string_view item) {
  size_t i = 0;
  while (i < item.size() && !std::isdigit(static_cast<unsigned char>(item[i]))) ++i;
  if (i == item.size()) return -1;
  long v = 0;
  for (; i < item.size() && std::isdigit(static_cast<unsigned char>(item[i])); ++i) {
    v = std::min<long>(v * 10 + (item[i] - '0'), INT_MAX);
  }
  return int(v);
}

// The comma-separated items of a line, trimmed.
std::vector<std::string_view> items_of(std::string_view line) {
  std::vector<std::string_view> out;
  while (!line.empty()) {
    const size_t comma = line.find(',');
    out.push_back(trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    line.remove_prefix(comma + 1);
  }
  return out;
}

std::string demangle(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !d) return mangled;  // an extern "C" kernel, or a name it does not know
  std::string out(d);
  std::free(d);
  return out;
}

// The name between the first pair of single quotes after `prefix`.
std::string quoted_after(std::string_view body, std::string_view prefix) {
  std::string_view rest = body.substr(prefix.size());
  const size_t end = rest.find('\'');
  return std::string(rest.substr(0, end));
}

}  // namespace

std::vector<KernelResources> parse_ptxas_report(std::string_view text, std::string_view source) {
  std::vector<KernelResources> out;
  long current = -1;          // the entry being compiled, an index in out
  bool props_current = false;  // the last "Function properties" block is the current entry's
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    // "ptxas info    : Used 52 registers, ..."; the stack line has no prefix.
    std::string_view body = trim(line);
    if (body.substr(0, 5) == "ptxas") {
      const size_t colon = body.find(':');
      if (colon == std::string_view::npos) continue;
      body = trim(body.substr(colon + 1));
    }
    constexpr std::string_view kEntry = "Compiling entry function '", kFunction = "Compiling function '",
                               kProps = "Function properties for ", kUsed = "Used ";
    if (body.substr(0, kEntry.size()) == kEntry) {
      KernelResources k;
      k.mangled = quoted_after(body, kEntry);
      k.demangled = demangle(k.mangled);
      k.source = std::string(source);
      out.push_back(std::move(k));
      current = long(out.size()) - 1;
      props_current = false;
    } else if (body.substr(0, kFunction.size()) == kFunction) {
      current = -1;  // a device function compiled on its own (relocatable code): not a kernel
      props_current = false;
    } else if (body.substr(0, kProps.size()) == kProps) {
      std::string_view name = trim(body.substr(kProps.size()));
      if (name.size() >= 2 && name.front() == '\'' && name.back() == '\'') name = name.substr(1, name.size() - 2);
      // A called device function's block (__internal_accurate_pow) follows its caller's.
      props_current = current >= 0 && name == out[size_t(current)].mangled;
    } else if (body.find("bytes stack frame") != std::string_view::npos) {
      if (!props_current) continue;
      KernelResources& k = out[size_t(current)];
      for (std::string_view item : items_of(body)) {
        const int v = first_number(item);
        if (v < 0) continue;
        if (ends_with(item, "stack frame")) k.stack_frame_bytes = v;
        else if (ends_with(item, "spill stores")) k.spill_store_bytes = v;
        else if (ends_with(item, "spill loads")) k.spill_load_bytes = v;
      }
      props_current = false;
    } else if (body.substr(0, kUsed.size()) == kUsed) {
      // "Used 52 registers, used 1 barriers, 4224 bytes smem"; also "N bytes cumulative
      // stack size", and in older ptxas "N bytes lmem", "N bytes cmem[0]": not kept.
      if (current < 0) continue;
      KernelResources& k = out[size_t(current)];
      for (std::string_view item : items_of(body)) {
        const int v = first_number(item);
        if (v < 0) continue;
        if (ends_with(item, "registers") || ends_with(item, "register")) k.registers = v;
        else if (ends_with(item, "barriers") || ends_with(item, "barrier")) k.barriers = v;
        else if (ends_with(item, "bytes smem")) k.static_shared_bytes = v;
      }
    }
  }
  return out;
}

std::string instance_from_pretty(const char* pretty) {
  if (!pretty) return "";
  const std::string_view p(pretty);
  constexpr std::string_view kWith = "Kernel = ";  // GCC: "[with auto Kernel = X]"; Clang: "[Kernel = X]"
  const size_t at = p.find(kWith);
  if (at == std::string_view::npos) return std::string(p);
  std::string_view v = p.substr(at + kWith.size());
  // The value runs to the bracket closing "[with", the last one; further template
  // parameters of instance_name would follow a "; ".
  if (!v.empty() && v.back() == ']') v.remove_suffix(1);
  const size_t semi = v.find("; ");
  if (semi != std::string_view::npos) v = v.substr(0, semi);
  v = trim(v);
  while (!v.empty() && (v.front() == '&' || v.front() == ' ')) v.remove_prefix(1);
  return std::string(v);
}

std::string kernel_name_key(std::string_view name) { return parse_name(name).key; }

void KernelTable::add(KernelResources k) {
  Name name = parse_name(k.demangled.empty() ? k.mangled : k.demangled);
  const size_t i = entries_.size();
  by_key_[name.key].push_back(i);
  by_base_[name.base].push_back(i);
  entries_.push_back(Entry{std::move(k), std::move(name)});
}

void KernelTable::add_report(std::string_view source, std::string_view text) {
  for (KernelResources& k : parse_ptxas_report(text, source)) add(std::move(k));
}

const KernelResources* KernelTable::find(const std::string& instance, const std::string& launch_file) const {
  const Name q = parse_name(instance);
  std::vector<size_t> cand;
  if (auto it = by_key_.find(q.key); it != by_key_.end()) cand = it->second;  // step 1
  if (cand.empty()) {                                                           // step 2
    if (auto it = by_base_.find(q.base); it != by_base_.end()) {
      for (size_t i : it->second) {
        const Name& e = entries_[i].name;
        if (e.is_template != q.is_template || e.args.size() != q.args.size()) continue;
        bool ok = true;
        for (size_t a = 0; ok && a < q.args.size(); ++a) {
          ok = e.args[a] == q.args[a] || e.wildcard[a] || q.wildcard[a];
        }
        if (ok) cand.push_back(i);
      }
    }
  }
  // Narrowed to the launch's own report, then to the same scope, where any are.
  auto narrow = [&](auto keep) {
    std::vector<size_t> kept;
    std::copy_if(cand.begin(), cand.end(), std::back_inserter(kept), keep);
    if (!kept.empty()) cand = std::move(kept);
  };
  narrow([&](size_t i) { return entries_[i].k.source == launch_file; });
  narrow([&](size_t i) { return entries_[i].name.scope == q.scope; });
  if (cand.empty()) return nullptr;
  for (size_t i : cand) {
    if (!same_resources(entries_[i].k, entries_[cand[0]].k)) return nullptr;  // ambiguous
  }
  return &entries_[cand[0]].k;
}

// ---- the registry -------------------------------------------------------------------------------

namespace {

struct Registry {
  std::mutex mu;
  std::vector<RegisteredReport> reports;
  size_t parsed = 0;  // reports[0, parsed) are in the table
  KernelTable table;
  std::unordered_map<std::string, const KernelResources*> found;  // instance '\n' launch file
};

Registry& registry() {
  static auto* r = new Registry;  // leaked: lookups may come from other objects' destructors
  return *r;
}

// Adds the reports registered since the last call (under r.mu).
void parse_pending(Registry& r) {
  if (r.parsed == r.reports.size()) return;
  for (; r.parsed < r.reports.size(); ++r.parsed) {
    const RegisteredReport& rep = r.reports[r.parsed];
    r.table.add_report(rep.source ? rep.source : "", rep.text ? rep.text : "");
  }
  r.found.clear();  // an unknown kernel may be known now, a unique one ambiguous
}

}  // namespace

void register_ptxas_report(const char* source, const char* text) noexcept {
  try {
    Registry& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    r.reports.push_back({source, text});
  } catch (...) {
    // Out of memory during static initialisation: this report's kernels stay unknown.
  }
}

const KernelResources* kernel_resources(const std::string& instance, const std::string& launch_file) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  parse_pending(r);
  const std::string key = instance + '\n' + launch_file;
  if (auto it = r.found.find(key); it != r.found.end()) return it->second;
  const KernelResources* k = r.table.find(instance, launch_file);
  r.found.emplace(key, k);
  return k;
}

std::vector<RegisteredReport> registered_ptxas_reports() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  return r.reports;
}

std::vector<const KernelResources*> registered_kernels() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  parse_pending(r);
  std::vector<const KernelResources*> out;
  for (size_t i = 0; i < r.table.size(); ++i) out.push_back(&r.table[i]);
  return out;
}

}  // namespace rt::emu
