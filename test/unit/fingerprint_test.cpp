#include "core/fingerprint.hpp"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace idem::core {
namespace {

std::optional<ErrorKind> error_kind(std::string_view json,
                                    const std::vector<std::string> &exclude = {}) {
    try {
        canonical_json(json, exclude);
    } catch (const Error &e) {
        return e.kind();
    }
    return std::nullopt;
}

std::string hex(const Sha256 &hash) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (const std::uint8_t b : hash) {
        out.push_back(kHex[b >> 4]);
        out.push_back(kHex[b & 0xf]);
    }
    return out;
}

std::string nested(int depth, std::string_view open, std::string_view inner,
                   std::string_view close) {
    std::string out;
    for (int i = 0; i < depth; ++i) out += open;
    out += inner;
    for (int i = 0; i < depth; ++i) out += close;
    return out;
}

TEST(Sha256, KnownVectors) {
    EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex(sha256("abc")),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(CanonicalJson, RemovesWhiteSpaceAndSortsMembers) {
    EXPECT_EQ(canonical_json(" { \"b\" : 1 ,\n\t\"a\" : [ 1 , 2 , { } , [ ] ] } \r\n"),
              R"({"a":[1,2,{},[]],"b":1})");
    EXPECT_EQ(canonical_json(R"({"z":{"y":1,"x":{"b":true,"a":false}},"m":null})"),
              R"({"m":null,"z":{"x":{"a":false,"b":true},"y":1}})");
}

TEST(CanonicalJson, SortsKeysBytewise) {
    // "" < "B" < "a" < "aa" < "\xc3\xa9" (e-acute): unsigned bytes, not length first.
    EXPECT_EQ(canonical_json("{\"\xc3\xa9\":5,\"aa\":4,\"a\":3,\"B\":2,\"\":1}"),
              "{\"\":1,\"B\":2,\"a\":3,\"aa\":4,\"\xc3\xa9\":5}");
}

TEST(CanonicalJson, KeepsArrayOrder) {
    EXPECT_EQ(canonical_json("[3,1,2]"), "[3,1,2]");
}

TEST(CanonicalJson, TopLevelScalars) {
    EXPECT_EQ(canonical_json(" true "), "true");
    EXPECT_EQ(canonical_json("false"), "false");
    EXPECT_EQ(canonical_json("null"), "null");
    EXPECT_EQ(canonical_json("\"x\""), "\"x\"");
    EXPECT_EQ(canonical_json(" 12.0 "), "12");
}

TEST(CanonicalJson, DuplicateKeysLastWins) {
    EXPECT_EQ(canonical_json(R"({"a":1,"a":2})"), R"({"a":2})");
    EXPECT_EQ(canonical_json(R"({"a":{"x":1},"b":0,"a":[3]})"), R"({"a":[3],"b":0})");
    EXPECT_EQ(canonical_json(R"({"a":1,"\u0061":2,"b":{"c":1,"c":null}})"),
              R"({"a":2,"b":{"c":null}})");
}

struct NumberCase {
    const char *in;
    const char *out;
};

void PrintTo(const NumberCase &c, std::ostream *os) {
    *os << c.in << " -> " << c.out;
}

const NumberCase kNumberCases[] = {
    {"0", "0"},
    {"-0", "0"},
    {"-0.0e5", "0"},
    {"0.00", "0"},
    {"0e-5", "0"},
    {"0e99999999999999999999", "0"},
    {"1", "1"},
    {"1.0", "1"},
    {"1.00", "1"},
    {"10e-1", "1"},
    {"0.1e1", "1"},
    {"1000e-3", "1"},
    {"100", "100"},
    {"120", "120"},
    {"1E2", "100"},
    {"1e+2", "100"},
    {"1.2e1", "12"},
    {"1.5e3", "1500"},
    {"1.50", "1.5"},
    {"15e-1", "1.5"},
    {"0.5", "0.5"},
    {"-0.5", "-0.5"},
    {"-12.340", "-12.34"},
    {"0.000120", "0.00012"},
    {"1e-7", "0.0000001"},
    {"123.456e1", "1234.56"},
    {"123.456e-5", "0.00123456"},
    {"-1E-2", "-0.01"},
    {"12345678901234567890123", "12345678901234567890123"},
    {"0.1000000000000000000001", "0.1000000000000000000001"},
};

class NumberForm : public ::testing::TestWithParam<NumberCase> {};

TEST_P(NumberForm, Normalizes) {
    const NumberCase c = GetParam();
    EXPECT_EQ(canonical_json(c.in), c.out);
    EXPECT_EQ(canonical_json(std::string("[") + c.in + "]"), std::string("[") + c.out + "]");
}

INSTANTIATE_TEST_SUITE_P(Table, NumberForm, ::testing::ValuesIn(kNumberCases));

TEST(CanonicalJson, NumberDigitLimit) {
    EXPECT_EQ(canonical_json("1e999"), "1" + std::string(999, '0'));
    EXPECT_EQ(canonical_json("1e-999"), "0." + std::string(998, '0') + "1");
    EXPECT_EQ(error_kind("1e1000"), ErrorKind::LimitExceeded);
    EXPECT_EQ(error_kind("1e-1000"), ErrorKind::LimitExceeded);
    EXPECT_EQ(error_kind("[1e1000000]"), ErrorKind::LimitExceeded);
    EXPECT_EQ(error_kind("-1e99999999999999999999999999"), ErrorKind::LimitExceeded);
    EXPECT_EQ(error_kind("1e-99999999999999999999999999"), ErrorKind::LimitExceeded);
    EXPECT_EQ(error_kind(std::string(1001, '9')), ErrorKind::LimitExceeded);
    // Trailing zeros cancelled by the exponent are not digits of the normal form.
    EXPECT_EQ(canonical_json("1" + std::string(5000, '0') + "e-5000"), "1");
}

TEST(CanonicalJson, StringEscapes) {
    EXPECT_EQ(canonical_json(R"("a\/b")"), R"("a/b")");
    EXPECT_EQ(canonical_json(R"("\u0041\u00e9")"), "\"A\xc3\xa9\"");
    EXPECT_EQ(canonical_json(R"("\u20AC")"), "\"\xe2\x82\xac\"");
    EXPECT_EQ(canonical_json(R"("\ud83d\ude00")"), "\"\xf0\x9f\x98\x80\"");  // surrogate pair
    EXPECT_EQ(canonical_json(R"("\uDBFF\uDFFF")"), "\"\xf4\x8f\xbf\xbf\"");
    EXPECT_EQ(canonical_json(R"("\"\\")"), R"("\"\\")");
    EXPECT_EQ(canonical_json(R"("\b\f\n\r\t")"), R"("\b\f\n\r\t")");
    EXPECT_EQ(canonical_json(R"("\u0008\u000C\u000a\u000D\u0009")"), R"("\b\f\n\r\t")");
    EXPECT_EQ(canonical_json(R"("\u001F\u0001\u0000")"), R"("\u001f\u0001\u0000")");
    EXPECT_EQ(canonical_json(R"("\u007f\u0022\u005c")"), "\"\x7f\\\"\\\\\"");
    EXPECT_EQ(canonical_json("\"caf\xc3\xa9 \xf0\x9f\x98\x80\""),
              "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
    EXPECT_EQ(canonical_json(R"({"k\u0065y":"x"})"), R"({"key":"x"})");
}

TEST(CanonicalJson, Exclude) {
    const std::string body =
        R"({"id":1,"meta":{"sent_at":"now","trace":"t"},"list":[{"a":1}],"n":5})";
    EXPECT_EQ(canonical_json(body, {"id"}),
              R"({"list":[{"a":1}],"meta":{"sent_at":"now","trace":"t"},"n":5})");
    EXPECT_EQ(canonical_json(body, {"meta.sent_at"}),
              R"({"id":1,"list":[{"a":1}],"meta":{"trace":"t"},"n":5})");
    EXPECT_EQ(canonical_json(body, {"meta.sent_at", "meta.trace", "id"}),
              R"({"list":[{"a":1}],"meta":{},"n":5})");
    EXPECT_EQ(canonical_json(body, {"meta"}), R"({"id":1,"list":[{"a":1}],"n":5})");
    // Missing paths, and paths through arrays or scalars, drop nothing.
    EXPECT_EQ(canonical_json(
                  body, {"missing", "meta.missing", "meta.sent_at.x", "list.a", "n.x", "sent_at"}),
              canonical_json(body));
    EXPECT_EQ(canonical_json("[1,{\"a\":2}]", {"a"}), "[1,{\"a\":2}]");
    EXPECT_EQ(canonical_json("\"a\"", {"a"}), "\"a\"");
}

TEST(CanonicalJson, ExcludeAppliesToTheWinningDuplicate) {
    EXPECT_EQ(canonical_json(R"({"a":1,"b":2,"a":3})", {"a"}), R"({"b":2})");
    EXPECT_EQ(canonical_json(R"({"m":{"x":1},"m":{"x":2,"y":3}})", {"m.x"}), R"({"m":{"y":3}})");
    EXPECT_EQ(canonical_json(R"({"m":{"x":1},"m":7})", {"m.x"}), R"({"m":7})");
}

TEST(CanonicalJson, InvalidExcludePaths) {
    for (const char *path : {"", ".", ".a", "a.", "a..b"}) {
        EXPECT_EQ(error_kind("{}", {path}), ErrorKind::InvalidParameter) << path;
    }
}

TEST(CanonicalJson, DepthLimit) {
    EXPECT_EQ(canonical_json(nested(kMaxJsonDepth, "[", "", "]")),
              nested(kMaxJsonDepth, "[", "", "]"));
    EXPECT_EQ(canonical_json(nested(kMaxJsonDepth, "{\"a\":", "1", "}")),
              nested(kMaxJsonDepth, "{\"a\":", "1", "}"));
    EXPECT_EQ(error_kind(nested(kMaxJsonDepth + 1, "[", "", "]")), ErrorKind::LimitExceeded);
    EXPECT_EQ(error_kind(nested(kMaxJsonDepth + 1, "{\"a\":", "1", "}")), ErrorKind::LimitExceeded);
    EXPECT_EQ(error_kind(std::string(1'000'000, '[')), ErrorKind::LimitExceeded);
}

TEST(CanonicalJson, RejectsMalformedJson) {
    const char *bad[] = {"",          " ",           "[",           "]",         "{",
                         "}",         "[1,]",        "[,1]",        "[1 2]",     "{\"a\":1,}",
                         "{,}",       "{\"a\"}",     "{\"a\" 1}",   "{\"a\":}",  "{a:1}",
                         "{1:1}",     "'a'",         "\"abc",       "\"abc\\\"", "\"\\x\"",
                         "\"\\u12\"", "\"\\u12g4\"", "\"\\U0041\"", "01",        "-01",
                         "1.",        ".5",          "-",           "+1",        "1e",
                         "1e+",       "1.e5",        "0x10",        "tru",       "nul",
                         "True",      "NaN",         "Infinity",    "[1]x",      "{} {}",
                         "1 2",       "\"a\tb\"",    "\"\x01\"",    "\"\x1f\"",  "\xef\xbb\xbf{}"};
    for (const std::string_view json : bad) {
        EXPECT_EQ(error_kind(json), ErrorKind::InvalidText) << json;
    }
    EXPECT_EQ(error_kind(std::string_view("[1]\0", 4)), ErrorKind::InvalidText);
}

TEST(CanonicalJson, RejectsUnpairedSurrogates) {
    for (const char *json :
         {R"("\ud800")", R"("\ud800x")", R"("\udbff\u0041")", R"("\ud800\ud800")", R"("\udc00")",
          R"("\ude00\ud83d")", R"("\ud800\")", R"("\ud800\n")"}) {
        EXPECT_EQ(error_kind(json), ErrorKind::InvalidText) << json;
    }
}

TEST(CanonicalJson, RejectsInvalidUtf8) {
    for (const char *json : {"\"\xff\"", "\"\x80\"", "\"\xc0\xaf\"", "\"\xc1\xbf\"",
                             "\"\xe0\x80\xaf\"", "\"\xed\xa0\x80\"", "\"\xf0\x80\x80\xaf\"",
                             "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"", "\"\xe2\x82\"",
                             "\"\xe2\x82", "\"\xc3", "{\"\xc3\":1}", "\xc3\xa9"}) {
        EXPECT_EQ(error_kind(json), ErrorKind::InvalidText) << json;
    }
    // Boundaries that are valid.
    for (const char *json : {"\"\xc2\x80\"", "\"\xdf\xbf\"", "\"\xe0\xa0\x80\"", "\"\xed\x9f\xbf\"",
                             "\"\xee\x80\x80\"", "\"\xf0\x90\x80\x80\"", "\"\xf4\x8f\xbf\xbf\""}) {
        EXPECT_EQ(canonical_json(json), json);
    }
}

TEST(Fingerprint, KnownValue) {
    EXPECT_EQ(hex(fingerprint_json(R"({"b":[true,null],"a":1})")),
              "1cc69c7fa23616ca2ec3ee70d24390a6225c8832db8a4c814c7e0e7f942f8668");
}

TEST(Fingerprint, EqualForEquivalentBodies) {
    const Sha256 a = fingerprint_json(R"({"a":1,"b":[true,null],"c":"\u00e9"})");
    EXPECT_EQ(fingerprint_json(" {\"c\":\"\xc3\xa9\", \"b\":[ true,null ],\"a\":1.0} "), a);
    EXPECT_EQ(fingerprint_json(R"({"c":"\u00E9","a":10e-1,"b":[true,null],"a":0.1e1})"), a);
    EXPECT_EQ(fingerprint_json(R"({"a":1,"b":[true,null],"c":"é","sent":"x"})", {"sent"}), a);
}

TEST(Fingerprint, DiffersForDifferentBodies) {
    const Sha256 a = fingerprint_json(R"({"a":1,"b":[1,2]})");
    EXPECT_NE(fingerprint_json(R"({"a":2,"b":[1,2]})"), a);
    EXPECT_NE(fingerprint_json(R"({"a":1,"b":[2,1]})"), a);
    EXPECT_NE(fingerprint_json(R"({"a":"1","b":[1,2]})"), a);
    EXPECT_NE(fingerprint_json(R"({"A":1,"b":[1,2]})"), a);
    EXPECT_NE(fingerprint_json(R"({"a":1,"b":[1,2],"c":null})"), a);
    EXPECT_NE(fingerprint_json(R"({"a":1.0001,"b":[1,2]})"), a);
}

TEST(Fingerprint, MatchesHashOfCanonicalFormForLargeBodies) {
    std::string body = "{";
    for (int i = 0; i < 5000; ++i) {
        if (i > 0) body += ",";
        body += "\"k" + std::to_string(i) + "\":[" + std::to_string(i) + ".50,\"v\\n\",1e3]";
    }
    body += "}";
    const std::string canonical = canonical_json(body);
    ASSERT_GT(canonical.size(), 64u * 1024);
    EXPECT_EQ(fingerprint_json(body), sha256(canonical));
    EXPECT_EQ(fingerprint_json(body, {"k1"}), sha256(canonical_json(body, {"k1"})));
}

TEST(Fingerprint, PropagatesErrors) {
    EXPECT_THROW(fingerprint_json("{"), Error);
    EXPECT_THROW(fingerprint_json("{}", {""}), Error);
}

}  // namespace
}  // namespace idem::core
