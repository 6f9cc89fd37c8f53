// The tar layer of WebDataset shards: TarWriter -> list_tar -> read_exact round trips
// (ustar names, the prefix split, pax paths), and archives built by hand block by block
// for what other writers produce (GNU long names, pax overrides, base-256 sizes, skipped
// entries) and for damaged or hostile files, whose errors must name the file and the fault.
#include "data/formats/tar.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/data/data_test_util.h"

using namespace rt::data;
using rt::data::test::Bytes;
using rt::data::test::check_error;
using rt::data::test::fresh_dir;
using rt::data::test::read_bytes;
using rt::data::test::write_bytes;

namespace {

Bytes pattern(size_t n, uint32_t seed) {
  Bytes b(n);
  std::mt19937 rng(seed);
  for (uint8_t& c : b) c = uint8_t(rng());
  return b;
}

Bytes as_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// A 512-byte header built field by field, independently of TarWriter; raw_header fills in
// the checksum unless told not to.
struct RawHeader {
  RawHeader(std::string n, std::string size = "", char t = '0', std::string pre = "", bool g = false)
      : name(std::move(n)), size_field(std::move(size)), type(t), prefix(std::move(pre)), gnu(g) {}
  std::string name;
  std::string size_field;  // 12 raw bytes; "" = octal of the data's size
  char type;
  std::string prefix;
  bool gnu;  // magic "ustar  \0" instead of "ustar\0" "00"
};

std::string octal_field(int64_t v, int len) {
  std::string s(size_t(len), '\0');
  for (int i = len - 2; i >= 0; --i, v >>= 3) s[size_t(i)] = char('0' + (v & 7));
  return s;
}

void put(Bytes& b, size_t off, const std::string& s) { std::memcpy(b.data() + off, s.data(), s.size()); }

void set_checksum(Bytes& h, bool signed_sum = false) {
  std::memset(h.data() + 148, ' ', 8);
  int64_t sum = 0;
  for (uint8_t c : h) sum += signed_sum ? int64_t(int8_t(c)) : int64_t(c);
  put(h, 148, octal_field(sum, 7) + " ");
}

Bytes raw_header(const RawHeader& r, bool checksum = true) {
  Bytes h(512, 0);
  put(h, 0, r.name);
  put(h, 100, octal_field(0644, 8));
  put(h, 124, r.size_field);
  put(h, 136, octal_field(0, 12));
  h[156] = uint8_t(r.type);
  put(h, 257, r.gnu ? std::string("ustar  \0", 8) : std::string("ustar\0" "00", 8));
  put(h, 345, r.prefix);
  if (checksum) set_checksum(h);
  return h;
}

void append(Bytes& out, const Bytes& b) { out.insert(out.end(), b.begin(), b.end()); }

void pad(Bytes& out) { out.resize((out.size() + 511) / 512 * 512, 0); }

// A header (octal size from the data unless `size_field` is given), the data, the padding.
void add_member(Bytes& out, RawHeader r, const Bytes& data) {
  if (r.size_field.empty()) r.size_field = octal_field(int64_t(data.size()), 12);
  append(out, raw_header(r));
  append(out, data);
  pad(out);
}

void add_end(Bytes& out) { out.resize(out.size() + 1024, 0); }

std::string pax_record(const std::string& kv) {
  size_t len = kv.size() + 2;  // ' ' and '\n'
  len += std::to_string(len + std::to_string(len).size()).size();
  return std::to_string(len) + " " + kv + "\n";
}

Bytes read_member(const RandomAccessFile& f, const TarMember& m) {
  Bytes b(size_t(m.size));
  f.read_exact(m.data_offset, b);
  return b;
}

struct Scratch {
  std::string dir = fresh_dir("tar");
  std::string file(const std::string& name) const { return dir + "/" + name; }
};

// list_tar of `bytes` written to a scratch file named `name`.
std::vector<TarMember> list_bytes(const std::string& path, const Bytes& bytes) {
  write_bytes(path, bytes);
  return list_tar(RandomAccessFile(path));
}

void check_list_error(const std::string& path, const Bytes& bytes, std::vector<std::string> parts) {
  write_bytes(path, bytes);
  parts.push_back(path);
  check_error([&] { list_tar(RandomAccessFile(path)); }, parts);
}

}  // namespace

TEST_CASE("TarWriter -> list_tar round trip: sizes around the block size, ustar, prefix split and pax names") {
  const Scratch s;
  const std::string path = s.file("round.tar");
  const std::string name101 = std::string(50, 'a') + "/" + std::string(50, 'b');   // prefix split
  const std::string name200 = std::string(120, 'c') + "/" + std::string(79, 'd');  // prefix split
  const std::string name300 = std::string(150, 'e') + "/" + std::string(149, 'f');  // no split fits: pax
  const std::string name101_flat(101, 'g');                                            // no '/': pax
  struct Want {
    std::string name;
    size_t size;
    bool pax;
  };
  const std::vector<Want> want = {
      {"k0.cls", 0, false},        {"k1.cls", 1, false},         {"k2.jpg", 511, false},
      {"k3.jpg", 512, false},      {"k4.jpg", 513, false},       {"k5.jpg", 100000, false},
      {std::string(99, 'n'), 3, false}, {std::string(100, 'm'), 700, false}, {name101, 10, false},
      {name200, 1024, false},      {name300, 5, true},           {name101_flat, 0, true},
  };
  TarWriter w(path, 1700000000);
  std::vector<Bytes> data;
  for (size_t i = 0; i < want.size(); ++i) {
    data.push_back(pattern(want[i].size, uint32_t(i)));
    w.add(want[i].name, data.back());
  }
  w.finish();
  CHECK(w.bytes_written() == int64_t(std::filesystem::file_size(path)));
  CHECK(w.bytes_written() % 512 == 0);

  const RandomAccessFile f(path);
  const std::vector<TarMember> got = list_tar(f);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].name == want[i].name);
    CHECK(got[i].size == int64_t(want[i].size));
    CHECK(got[i].data_offset % 512 == 0);
    // A pax header (and its one block of records) comes before the ustar header.
    CHECK(got[i].header_offset == got[i].data_offset - (want[i].pax ? 1536 : 512));
    CHECK(read_member(f, got[i]) == data[i]);
  }
  // The split puts the directories in the ustar prefix field (a POSIX reader joins them).
  const Bytes raw = read_bytes(path);
  const size_t h101 = size_t(got[8].header_offset);
  CHECK(std::string(raw.begin() + long(h101) + 345, raw.begin() + long(h101) + 395) == std::string(50, 'a'));
  CHECK(std::string(raw.begin() + long(h101), raw.begin() + long(h101) + 50) == std::string(50, 'b'));
  // The archive ends with two zero blocks.
  CHECK(std::all_of(raw.end() - 1024, raw.end(), [](uint8_t c) { return c == 0; }));
}

TEST_CASE("TarWriter: an empty archive, and refused names, finished and failing writers") {
  const Scratch s;
  {
    TarWriter w(s.file("empty.tar"));
    w.finish();
    CHECK(w.bytes_written() == 1024);
    CHECK(list_tar(RandomAccessFile(s.file("empty.tar"))).empty());
  }
  TarWriter w(s.file("w.tar"));
  check_error([&] { w.add("", Bytes{1}); }, {s.file("w.tar"), "empty name"});
  check_error([&] { w.add(std::string("a\0b", 3), Bytes{1}); }, {s.file("w.tar"), "NUL"});
  w.add("ok", Bytes{1});
  w.finish();
  check_error([&] { w.add("late", Bytes{1}); }, {s.file("w.tar"), "late", "finished"});
  check_error([&] { TarWriter bad(s.file("no/such/dir.tar")); }, {s.file("no/such/dir.tar"), "cannot create"});
  // /dev/full fails every write with ENOSPC; a 2 MiB member goes past the buffer at once.
  if (std::filesystem::exists("/dev/full")) {
    TarWriter full("/dev/full");
    check_error([&] { full.add("big.jpg", Bytes(2 << 20)); }, {"/dev/full", "big.jpg", "No space left"});
    check_error([&] { full.add("next.jpg", Bytes{1}); }, {"/dev/full", "earlier error"});
  }
}

TEST_CASE("RandomAccessFile: open errors, bounds, hints") {
  const Scratch s;
  check_error([&] { RandomAccessFile f(s.file("missing.tar")); },
              {s.file("missing.tar"), "cannot open", "No such file or directory"});
  check_error([&] { RandomAccessFile f(s.dir); }, {s.dir, "not a regular file"});
  REQUIRE(::mkfifo(s.file("fifo").c_str(), 0600) == 0);  // must not block the open
  check_error([&] { RandomAccessFile f(s.file("fifo")); }, {s.file("fifo"), "not a regular file"});
  const Bytes ten = pattern(10, 7);
  write_bytes(s.file("ten"), ten);
  const RandomAccessFile f(s.file("ten"));
  CHECK(f.size() == 10);
  CHECK(f.path() == s.file("ten"));
  Bytes b(4);
  f.read_exact(6, b);
  CHECK(b == Bytes(ten.begin() + 6, ten.end()));
  f.read_exact(10, std::span<uint8_t>());  // empty, at the end: a 0-byte member's data
  check_error([&] { f.read_exact(7, b); }, {s.file("ten"), "4 bytes at offset 7", "outside"});
  check_error([&] { f.read_exact(-1, b); }, {s.file("ten"), "offset -1", "outside"});
  check_error([&] { f.read_exact(11, std::span<uint8_t>()); }, {s.file("ten"), "outside"});
  f.will_need(0, 10);
  f.will_need(5, int64_t(1) << 62);
  f.will_need(-5, 3);
  f.will_need(100, 10);
  f.sequential();
}

TEST_CASE("list_tar: files that are not tars") {
  const Scratch s;
  check_list_error(s.file("empty.tar"), {}, {"empty file", "not a tar"});
  check_list_error(s.file("random.tar"), pattern(4096, 1), {"not a tar file"});
  Bytes jpeg = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0x00};
  jpeg.resize(2048, 0x55);
  check_list_error(s.file("jpeg.tar"), jpeg, {"not a tar file", "checksum"});
  check_list_error(s.file("short.tar"), pattern(100, 2), {"not a tar file", "100 bytes"});
  // A valid checksum without the ustar magic (a pre-POSIX tar, or chance).
  Bytes v7 = raw_header({"a", octal_field(0, 12)}, false);
  std::memset(v7.data() + 257, 0, 8);
  set_checksum(v7);
  check_list_error(s.file("v7.tar"), v7, {"not a tar file", "magic"});
}

TEST_CASE("list_tar: damaged archives name the member, the offset and the fault") {
  const Scratch s;
  Bytes good;
  add_member(good, {"a.jpg"}, pattern(1000, 1));  // header at 0, data at 512, next at 1536
  add_member(good, {"a.cls"}, as_bytes("7"));     // header at 1536
  add_end(good);

  SUBCASE("truncated in the data") {
    const Bytes cut(good.begin(), good.begin() + 512 + 500);
    check_list_error(s.file("cut.tar"), cut, {"truncated", "a.jpg", "524 bytes missing", "re-download"});
  }
  SUBCASE("truncated in the padding") {
    const Bytes cut(good.begin(), good.begin() + 512 + 1000);
    check_list_error(s.file("cut.tar"), cut, {"truncated", "a.jpg", "24 bytes missing"});
  }
  SUBCASE("cut in the middle of a header") {
    const Bytes cut(good.begin(), good.begin() + 1536 + 100);
    check_list_error(s.file("cut.tar"), cut, {"cut short", "offset 1536", "412 bytes missing"});
  }
  SUBCASE("bad checksum in the second header") {
    Bytes bad = good;
    bad[1536 + 1] ^= 0x20;  // the name
    check_list_error(s.file("sum.tar"), bad, {"checksum", "offset 1536"});
  }
  SUBCASE("size field that is not octal") {
    Bytes bad;
    add_member(bad, {"x.jpg", std::string("0000000012x\0", 12)}, Bytes(10));
    add_end(bad);
    check_list_error(s.file("size.tar"), bad, {"size field", "0000000012x", "x.jpg", "offset 0"});
  }
  SUBCASE("size field larger than the file") {
    Bytes bad;
    append(bad, raw_header({"big.jpg", octal_field(077777777777, 12)}));
    add_end(bad);
    check_list_error(s.file("size.tar"), bad, {"truncated", "big.jpg", "8589934591 bytes"});
  }
  SUBCASE("base-256 size of 2^62") {
    std::string f(12, '\0');
    f[0] = char(0x80);
    f[4] = 0x40;  // bytes 1..11 big-endian: 2^62 = 0x40 followed by 7 zero bytes
    Bytes bad;
    append(bad, raw_header({"huge.jpg", f}));
    add_end(bad);
    check_list_error(s.file("b256.tar"), bad, {"truncated", "huge.jpg", "4611686018427387904 bytes"});
  }
  SUBCASE("base-256 size beyond int64, and a negative one") {
    std::string f(12, char(0xFF));
    f[0] = char(0x80);
    Bytes bad;
    append(bad, raw_header({"over.jpg", f}));
    add_end(bad);
    check_list_error(s.file("over.tar"), bad, {"size field", "over.jpg"});
    Bytes neg;
    append(neg, raw_header({"neg.jpg", std::string(12, char(0xFF))}));
    add_end(neg);
    check_list_error(s.file("neg.tar"), neg, {"size field", "negative", "neg.jpg"});
  }
  SUBCASE("empty name") {
    Bytes bad;
    add_member(bad, {""}, as_bytes("x"));
    add_end(bad);
    check_list_error(s.file("noname.tar"), bad, {"empty name", "offset 0"});
  }
  SUBCASE("GNU sparse member") {
    Bytes bad;
    add_member(bad, {"sparse.bin", "", 'S', "", true}, Bytes(10));
    add_end(bad);
    check_list_error(s.file("sparse.tar"), bad, {"sparse", "sparse.bin"});
  }
}

TEST_CASE("list_tar: extended headers are bounded and strict") {
  const Scratch s;
  SUBCASE("a pax header claiming 8 GiB: refused before anything is read") {
    Bytes bad;
    append(bad, raw_header({"././@PaxHeader", octal_field(077777777777, 12), 'x'}));
    add_end(bad);
    check_list_error(s.file("pax.tar"), bad, {"pax header", "8589934591 bytes", "limit", "offset 0"});
  }
  SUBCASE("a GNU long name just over 1 MiB, present in the file") {
    Bytes bad;
    add_member(bad, {"././@LongLink", "", 'L', "", true}, Bytes((1 << 20) + 1, 'a'));
    add_member(bad, {"short", "", '0', "", true}, Bytes(1));
    add_end(bad);
    check_list_error(s.file("long.tar"), bad, {"long-name", "1048577 bytes", "limit"});
  }
  auto with_pax = [](const std::string& records) {
    Bytes b;
    add_member(b, {"././@PaxHeader", "", 'x'}, as_bytes(records));
    add_member(b, {"m.jpg"}, as_bytes("data"));
    add_end(b);
    return b;
  };
  SUBCASE("a length field that does not match") {
    check_list_error(s.file("p.tar"), with_pax("30 path=abc\n"), {"malformed pax record", "offset 0"});
    check_list_error(s.file("p.tar"), with_pax("10 path=abc\n"), {"malformed pax record"});
  }
  SUBCASE("no '=', no newline, no length") {
    check_list_error(s.file("p.tar"), with_pax("9 pathab\n"), {"malformed pax record"});
    check_list_error(s.file("p.tar"), with_pax("11 path=abc "), {"malformed pax record"});
    check_list_error(s.file("p.tar"), with_pax("path=abc\n"), {"malformed pax record"});
    check_list_error(s.file("p.tar"), with_pax("6 =ab\n"), {"malformed pax record"});
  }
  SUBCASE("junk after the records, and a size that is not a number") {
    check_list_error(s.file("p.tar"), with_pax(pax_record("path=a") + "junk"), {"malformed pax"});
    check_list_error(s.file("p.tar"), with_pax(pax_record("size=12k")), {"pax size", "12k"});
  }
  SUBCASE("an extended header followed by the end of the archive") {
    Bytes bad;
    add_member(bad, {"x"}, as_bytes("z"));
    add_member(bad, {"././@PaxHeader", "", 'x'}, as_bytes(pax_record("path=lost")));
    add_end(bad);
    check_list_error(s.file("p.tar"), bad, {"followed by no member", "offset 1024"});
  }
}

TEST_CASE("list_tar: what other writers produce") {
  const Scratch s;
  SUBCASE("directories, links and global headers are skipped; '\\0' and '7' are regular files") {
    Bytes b;
    add_member(b, {"dir/", "", '5'}, {});
    add_member(b, {"./@PaxHeader", "", 'g'}, as_bytes(pax_record("comment=made by hand")));
    add_member(b, {"dir/a.jpg", "", '0'}, as_bytes("AAA"));
    add_member(b, {"dir/link.jpg", "", '2'}, {});
    add_member(b, {"dir/hard.jpg", "", '1'}, {});
    add_member(b, {"dir/fifo", "", '6'}, {});
    add_member(b, {"old/", "", '\0'}, {});  // a pre-POSIX directory
    add_member(b, {"dir/b.cls", "", '\0'}, as_bytes("1"));
    add_member(b, {"dir/c.bin", "", '7'}, pattern(600, 3));
    add_end(b);
    write_bytes(s.file("mixed.tar"), b);
    const RandomAccessFile f(s.file("mixed.tar"));
    const std::vector<TarMember> m = list_tar(f);
    REQUIRE(m.size() == 3);
    CHECK(m[0].name == "dir/a.jpg");
    CHECK(m[0].header_offset == 1536);
    CHECK(read_member(f, m[0]) == as_bytes("AAA"));
    CHECK(m[1].name == "dir/b.cls");
    CHECK(m[2].name == "dir/c.bin");
    CHECK(read_member(f, m[2]) == pattern(600, 3));
  }
  SUBCASE("a pax header overrides path and size (the ustar size field 0, as for members of 8 GiB)") {
    Bytes b;
    const std::string long_path = "shard/" + std::string(180, 'p') + ".jpg";
    add_member(b, {"././@PaxHeader", "", 'x'},
               as_bytes(pax_record("mtime=1.5") + pax_record("path=" + long_path) + pax_record("size=700")));
    append(b, raw_header({"truncated-ustar-name", octal_field(0, 12)}));
    append(b, pattern(700, 4));
    pad(b);
    add_member(b, {"after.cls"}, as_bytes("2"));
    add_end(b);
    write_bytes(s.file("pax.tar"), b);
    const RandomAccessFile f(s.file("pax.tar"));
    const std::vector<TarMember> m = list_tar(f);
    REQUIRE(m.size() == 2);
    CHECK(m[0].name == long_path);
    CHECK(m[0].header_offset == 0);
    CHECK(m[0].data_offset == 1536);
    CHECK(m[0].size == 700);
    CHECK(read_member(f, m[0]) == pattern(700, 4));
    CHECK(m[1].name == "after.cls");  // the pax values applied to one member only
    CHECK(m[1].header_offset == 1536 + 1024);
  }
  SUBCASE("pending pax and long-name values skip the extended headers between them and their member") {
    Bytes b;
    add_member(b, {"././@PaxHeader", "", 'x'}, as_bytes(pax_record("size=3")));
    add_member(b, {"././@PaxHeader", "", 'x'}, as_bytes(pax_record("path=dir/" + std::string(120, 'q'))));
    add_member(b, {"././@LongLink", "", 'K', "", true}, as_bytes(std::string(150, 't') + '\0'));
    append(b, raw_header({"cut", octal_field(0, 12)}));
    append(b, as_bytes("abc"));
    pad(b);
    add_member(b, {"././@LongLink", "", 'L', "", true}, as_bytes(std::string(130, 'l') + '\0'));
    add_member(b, {"././@LongLink", "", 'K', "", true}, as_bytes(std::string(150, 't') + '\0'));
    add_member(b, {"cut", "", '2', "", true}, {});  // a symlink with a long name and target
    add_member(b, {"last.cls"}, as_bytes("4"));
    add_end(b);
    write_bytes(s.file("chain.tar"), b);
    const RandomAccessFile f(s.file("chain.tar"));
    const std::vector<TarMember> m = list_tar(f);
    REQUIRE(m.size() == 2);
    CHECK(m[0].name == "dir/" + std::string(120, 'q'));
    CHECK(m[0].header_offset == 0);
    CHECK(m[0].size == 3);
    CHECK(read_member(f, m[0]) == as_bytes("abc"));
    CHECK(m[1].name == "last.cls");
    CHECK(read_member(f, m[1]) == as_bytes("4"));
  }
  SUBCASE("a GNU long name; GNU headers have no prefix field; a base-256 size") {
    Bytes b;
    const std::string long_name = std::string(250, 'L') + ".jpg";
    Bytes ln = as_bytes(long_name);
    ln.push_back(0);  // GNU tar counts the NUL in the size
    add_member(b, {"././@LongLink", "", 'L', "", true}, ln);
    add_member(b, {"cut-name", "", '0', "", true}, as_bytes("long"));
    RawHeader gnu{"plain.cls", "", '0', "atime-ctime-here", true};
    add_member(b, gnu, as_bytes("9"));
    std::string b256(12, '\0');
    b256[0] = char(0x80);
    b256[11] = 5;
    add_member(b, {"b256.bin", b256, '0', "", true}, as_bytes("12345"));
    add_end(b);
    write_bytes(s.file("gnu.tar"), b);
    const RandomAccessFile f(s.file("gnu.tar"));
    const std::vector<TarMember> m = list_tar(f);
    REQUIRE(m.size() == 3);
    CHECK(m[0].name == long_name);
    CHECK(m[0].header_offset == 0);
    CHECK(read_member(f, m[0]) == as_bytes("long"));
    CHECK(m[1].name == "plain.cls");
    CHECK(m[2].name == "b256.bin");
    CHECK(read_member(f, m[2]) == as_bytes("12345"));
  }
  SUBCASE("a ustar prefix written by hand, and a checksum summed over signed bytes") {
    Bytes b;
    add_member(b, {"name.jpg", "", '0', "some/dir"}, as_bytes("x"));
    Bytes h = raw_header({"caf\xC3\xA9.cls", octal_field(1, 12)}, false);
    set_checksum(h, true);
    append(b, h);
    append(b, as_bytes("y"));
    pad(b);
    add_end(b);
    const std::vector<TarMember> m = list_bytes(s.file("prefix.tar"), b);
    REQUIRE(m.size() == 2);
    CHECK(m[0].name == "some/dir/name.jpg");
    CHECK(m[1].name == "caf\xC3\xA9.cls");
  }
  SUBCASE("the end of the file right after the last member, without zero blocks") {
    Bytes b;
    add_member(b, {"a.jpg"}, pattern(513, 5));
    add_member(b, {"a.cls"}, {});
    const std::vector<TarMember> m = list_bytes(s.file("noend.tar"), b);
    REQUIRE(m.size() == 2);
    CHECK(m[1].data_offset == int64_t(b.size()));
    CHECK(m[1].size == 0);
  }
  SUBCASE("garbage after the two zero blocks is ignored") {
    Bytes b;
    add_member(b, {"a.jpg"}, pattern(10, 6));
    add_end(b);
    append(b, pattern(777, 9));
    const std::vector<TarMember> m = list_bytes(s.file("tail.tar"), b);
    REQUIRE(m.size() == 1);
    CHECK(m[0].name == "a.jpg");
  }
  SUBCASE("an archive of zero blocks only has no members") {
    CHECK(list_bytes(s.file("zeros.tar"), Bytes(10240, 0)).empty());
  }
}
