// Entries selectable by name that register themselves from their own source files, at static
// initialisation (the models' RT_REGISTER_MODEL, the datasets' RT_REGISTER_DATASET), so that
// adding one edits no list. The rooms keep their entry types and their messages for a name not
// found; what every such registry needs is here.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace rt {

// Note [Deferred registration errors]
// A registration runs in a static initialiser, before main: an exception there would end the
// program with nothing a user could act on, and nothing there can print a message either. So
// a registration's problem (a name taken twice, an entry without its factory) is remembered,
// the entry left out, and every later lookup throws it as an rt::Error. Only the first is
// kept: it is the one to fix, and later ones may follow from it.

// `Entry` has a `std::string name`. Keep the registry in a function-local static, so that a
// registration from another file's static initialiser finds it constructed.
template <typename Entry>
class NameRegistry {
 public:
  // Puts the entries `a`, `b` in order: true when `a` goes before `b`.
  using Before = std::function<bool(const Entry& a, const Entry& b)>;

  // `kind` ("model") and `macro` ("RT_REGISTER_MODEL") name an entry and its registration in
  // the message for a name taken twice. `initial`: entries known without registering.
  NameRegistry(std::string kind, std::string macro, std::vector<Entry> initial = {})
      : kind_(std::move(kind)), macro_(std::move(macro)), entries_(std::move(initial)) {}

  // Remembers `error` for every later lookup (Note [Deferred registration errors]) and returns
  // false, so that a registration checking its entry can `return refuse(...)`.
  bool refuse(std::string error) {
    if (error_.empty()) error_ = std::move(error);
    return false;
  }

  // Adds `entry`, refusing a name already taken. Without `before` it goes last; with it, after
  // every entry that it does not go before, so entries equal under `before` keep their
  // registration order (and every entry added with the same `before` stays sorted by it).
  bool add(Entry entry, const Before& before = nullptr) {
    for (const Entry& e : entries_)
      if (e.name == entry.name)
        return refuse(kind_ + " '" + entry.name + "' is registered twice (" + macro_ + "): rename one");
    auto at = entries_.end();
    if (before) at = std::upper_bound(entries_.begin(), entries_.end(), entry, before);
    entries_.insert(at, std::move(entry));
    return true;
  }

  // Every lookup below throws the registration error first.
  const std::vector<Entry>& entries() const {
    RT_CHECK(error_.empty(), error_);
    return entries_;
  }

  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const Entry& e : entries()) n.push_back(e.name);
    return n;
  }

  // The entry named `name`, else nullptr: the caller's message then lists joined_names().
  const Entry* find(const std::string& name) const {
    for (const Entry& e : entries())
      if (e.name == name) return &e;
    return nullptr;
  }

  // The names in order, separated by ", ".
  std::string joined_names() const {
    std::string known;
    for (const Entry& e : entries()) known += (known.empty() ? "" : ", ") + e.name;
    return known;
  }

 private:
  std::string kind_, macro_;
  std::vector<Entry> entries_;
  std::string error_;  // the first registration error, "" while none
};

}  // namespace rt
