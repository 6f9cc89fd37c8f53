// The registry behind RT_REGISTER_MODEL and RT_REGISTER_DATASET: names in registration order
// (or sorted by the caller's order, ties in registration order), a name taken twice refused at
// every later lookup with the first error (Note [Deferred registration errors] in
// base/name_registry.h), an unknown name found as none with the known names to list.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "base/name_registry.h"

namespace {

struct Item {
  std::string name;
  int order = 0;
};

using Registry = rt::NameRegistry<Item>;

bool by_order(const Item& a, const Item& b) { return a.order < b.order; }

std::string error_of(const Registry& r) {
  try {
    r.entries();
  } catch (const rt::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("names come in registration order, the initial entries first") {
  Registry r("item", "RT_REGISTER_ITEM", {{"b"}, {"a"}});
  CHECK(r.add({"d"}));
  CHECK(r.add({"c"}));
  CHECK(r.names() == std::vector<std::string>{"b", "a", "d", "c"});
  CHECK(r.joined_names() == "b, a, d, c");
  REQUIRE(r.find("d") != nullptr);
  CHECK(r.find("d")->name == "d");
}

TEST_CASE("with an order, an entry goes after every entry of its order or a lower one") {
  Registry r("item", "RT_REGISTER_ITEM");
  CHECK(r.add({"twenty", 20}, by_order));
  CHECK(r.add({"ten", 10}, by_order));
  CHECK(r.add({"twenty-too", 20}, by_order));
  CHECK(r.add({"fifteen", 15}, by_order));
  CHECK(r.add({"ten-too", 10}, by_order));
  CHECK(r.names() == std::vector<std::string>{"ten", "ten-too", "fifteen", "twenty", "twenty-too"});
}

TEST_CASE("an unknown name is found as none, and the known names can be listed") {
  Registry r("item", "RT_REGISTER_ITEM", {{"x"}, {"y"}});
  CHECK(r.find("z") == nullptr);
  CHECK(r.find("") == nullptr);
  CHECK(r.joined_names() == "x, y");
  CHECK(Registry("item", "RT_REGISTER_ITEM").joined_names().empty());
}

TEST_CASE("a name taken twice is refused, and every later lookup throws the first error") {
  Registry r("item", "RT_REGISTER_ITEM", {{"x"}});
  CHECK(r.add({"y"}));
  CHECK_FALSE(r.add({"x"}));
  const std::string twice = "item 'x' is registered twice (RT_REGISTER_ITEM): rename one";
  CHECK(error_of(r) == twice);
  CHECK_THROWS_WITH_AS(r.names(), twice.c_str(), rt::Error);
  CHECK_THROWS_WITH_AS(r.find("y"), twice.c_str(), rt::Error);
  CHECK_THROWS_WITH_AS(r.joined_names(), twice.c_str(), rt::Error);
  // A later problem does not replace the first.
  CHECK_FALSE(r.add({"y"}));
  CHECK_FALSE(r.refuse("another problem"));
  CHECK(error_of(r) == twice);
}

TEST_CASE("a problem the caller finds is remembered the same way") {
  Registry r("item", "RT_REGISTER_ITEM");
  CHECK_FALSE(r.refuse("an item was registered with an empty name"));
  CHECK_THROWS_WITH_AS(r.names(), "an item was registered with an empty name", rt::Error);
}
