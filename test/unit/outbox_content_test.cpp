#include "core/outbox_content.hpp"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace idem::core {
namespace {

bool valid(std::string_view text) {
    return check_json_value(text) == JsonCheck::Valid;
}

TEST(OutboxContent, ValidJson) {
    for (const char *text :
         {"null", "true", "false", "0", "-0", "12", "-1.5e+3", "1E9", "0.25", "\"\"",
          "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\"", "\"h\xc3\xa9\"", "[]", "{}",
          " [ 1 , 2 ] ", "{\"a\":{\"b\":[true,false,null,{\"c\":\"d\"}]},\"e\":-1}",
          "[[[[[]]]],{}]", "\n{\"k\" :\t1}\r\n"})
        EXPECT_TRUE(valid(text)) << text;
}

TEST(OutboxContent, InvalidJson) {
    for (const char *text : {"",
                             " ",
                             "nul",
                             "nulls",
                             "True",
                             "01",
                             "-",
                             "1.",
                             ".5",
                             "1e",
                             "1e+",
                             "+1",
                             "0x10",
                             "\"abc",
                             "\"a\\x\"",
                             "\"\\u12g4\"",
                             "\"\\u12\"",
                             "\"tab\there\"",
                             "[1,]",
                             "[,1]",
                             "{\"a\":1,}",
                             "{\"a\"}",
                             "{\"a\" 1}",
                             "{1:2}",
                             "{'a':1}",
                             "[1 2]",
                             "[1",
                             "]",
                             "{",
                             "{\"a\":1}}",
                             "[1]]",
                             "[}",
                             "{]",
                             "1 2",
                             "1,\"key\":\"x\"",
                             "{\"a\":1},{\"b\":2}",
                             "NaN",
                             "Infinity"})
        EXPECT_FALSE(valid(text)) << text;
    EXPECT_FALSE(valid(std::string("\"a\0b\"", 5)));
    EXPECT_FALSE(valid(std::string("[1]\0", 4)));
}

TEST(OutboxContent, Depth) {
    std::string ok(kMaxCheckedDepth, '[');
    ok += std::string(kMaxCheckedDepth, ']');
    EXPECT_EQ(check_json_value(ok), JsonCheck::Valid);
    std::string deep(kMaxCheckedDepth + 1, '[');
    deep += std::string(kMaxCheckedDepth + 1, ']');
    EXPECT_EQ(check_json_value(deep), JsonCheck::TooDeep);
    std::string unbalanced(1000, '[');
    unbalanced += std::string(999, ']');
    EXPECT_EQ(check_json_value(unbalanced), JsonCheck::Invalid);
}

// With bits sized from the text, any depth is checked: one byte opens at most one level.
TEST(OutboxContent, AnyDepthWithBitsSizedFromTheText) {
    auto check = [](const std::string &text) {
        std::vector<std::uint64_t> words(nesting_words_for(text.size()));
        return check_json_value(text, NestingBits{words.data(), words.size()});
    };
    const std::size_t depth = 4 * kMaxCheckedDepth + 3;
    std::string arrays = std::string(depth, '[') + std::string(depth, ']');
    EXPECT_EQ(check(arrays), JsonCheck::Valid);
    std::string objects;
    for (std::size_t i = 0; i < depth; ++i) objects += "{\"a\":";
    objects += "[1,{}]" + std::string(depth, '}');
    EXPECT_EQ(check(objects), JsonCheck::Valid);
    // Mixed: every other level an object, closed by the wrong bracket at the deepest level.
    std::string mixed, closing;
    for (std::size_t i = 0; i < depth; ++i) mixed += i % 2 ? "[" : "{\"k\":";
    for (std::size_t i = depth; i-- > 0;) closing += i % 2 ? "]" : "}";
    EXPECT_EQ(check(mixed + "0" + closing), JsonCheck::Valid);
    EXPECT_EQ(check(mixed + "0" + closing.substr(1)), JsonCheck::Invalid);
    EXPECT_EQ(check(std::string(depth, '[') + std::string(depth - 1, ']')), JsonCheck::Invalid);
    EXPECT_EQ(check(std::string(depth, '[') + std::string(depth, ']') + "]"), JsonCheck::Invalid);
    // Smallest texts: a single bracket, and bits for an empty text.
    EXPECT_EQ(check("["), JsonCheck::Invalid);
    EXPECT_EQ(check("[]"), JsonCheck::Valid);
    EXPECT_EQ(check(""), JsonCheck::Invalid);
    // Too few bits: TooDeep, not a wrong answer.
    std::uint64_t one_word;
    std::string deep65 = std::string(65, '[') + std::string(65, ']');
    EXPECT_EQ(check_json_value(deep65, NestingBits{&one_word, 1}), JsonCheck::TooDeep);
    std::string deep64 = std::string(64, '[') + std::string(64, ']');
    EXPECT_EQ(check_json_value(deep64, NestingBits{&one_word, 1}), JsonCheck::Valid);
    // The content check takes the same bits.
    std::string content = "{\"topic\":\"t\",\"payload\":" + arrays + "}";
    OutboxContent parts;
    EXPECT_EQ(check_outbox_content(content, &parts), JsonCheck::TooDeep);
    std::vector<std::uint64_t> words(nesting_words_for(content.size()));
    ASSERT_EQ(check_outbox_content(content, &parts, NestingBits{words.data(), words.size()}),
              JsonCheck::Valid);
    EXPECT_EQ(parts.payload, arrays);
}

TEST(OutboxContent, Layout) {
    OutboxContent parts;
    std::string content = R"({"topic":"or\"ders","payload":{"id": 1, "s": "}"}})";
    ASSERT_EQ(check_outbox_content(content, &parts), JsonCheck::Valid);
    EXPECT_EQ(parts.topic, R"("or\"ders")");
    EXPECT_EQ(parts.payload, R"({"id": 1, "s": "}"})");
    EXPECT_EQ(parts.members, R"("topic":"or\"ders","payload":{"id": 1, "s": "}"})");
    ASSERT_EQ(check_outbox_content(R"({"topic":"t","payload":null})", &parts), JsonCheck::Valid);
    EXPECT_EQ(parts.payload, "null");
}

TEST(OutboxContent, RejectsOtherLayoutsAndForgedMembers) {
    OutboxContent parts;
    for (const char *content :
         {R"({"topic":"t","payload":1,"key":"ffffffffffffffffffffffffffffffff"})",
          R"({"topic":"t","payload":1},{"key":"x"})", R"({"topic":"t","payload":})",
          R"({"topic":"t","payload":1)", R"({"topic":"t", "payload":1})",
          R"({ "topic":"t","payload":1})", R"({"payload":1,"topic":"t"})",
          R"({"topic":1,"payload":1})", R"({"topic":"t,"payload":1})",
          R"({"topic":"t","key":"x","payload":1})", R"({"topic":"t"})", "{}", "", "not json",
          R"({"topic":"t\","payload":1})", R"({"topic":"t","payload":"a"}})"})
        EXPECT_EQ(check_outbox_content(content, &parts), JsonCheck::Invalid) << content;
}

// Random edits of valid documents: whatever the checker accepts composes as one value inside
// an array and as an object member, so it can neither close the line's object nor add members.
TEST(OutboxContent, MutationsNeverLeakTopLevelMembers) {
    const std::string seeds[] = {R"({"a":[1,2,{"b":"c\"d"}],"e":null})", R"([true,"x",-0.5e3])",
                                 R"("str\\ing")"};
    const char alphabet[] = "{}[],:\"\\ 0123456789-+.eEtrufalsn";
    std::mt19937 random(1);
    int accepted = 0;
    for (int i = 0; i < 200000; ++i) {
        std::string text = seeds[i % 3];
        int edits = 1 + random() % 3;
        for (int e = 0; e < edits; ++e) {
            std::size_t at = random() % (text.size() + 1);
            char c = alphabet[random() % (sizeof alphabet - 1)];
            switch (random() % 3) {
                case 0:
                    text.insert(at, 1, c);
                    break;
                case 1:
                    if (at < text.size()) text.erase(at, 1);
                    break;
                default:
                    if (at < text.size()) text[at] = c;
            }
        }
        if (!valid(text)) continue;
        ++accepted;
        EXPECT_TRUE(valid("[" + text + ",0]")) << text;
        EXPECT_TRUE(valid("{\"k\":" + text + "}")) << text;
        OutboxContent parts;  // views into content: it must outlive them
        const std::string content = "{\"topic\":\"t\",\"payload\":" + text + "}";
        ASSERT_EQ(check_outbox_content(content, &parts), JsonCheck::Valid) << text;
        EXPECT_EQ(parts.payload, text);
    }
    EXPECT_GT(accepted, 1000);
}

}  // namespace
}  // namespace idem::core
