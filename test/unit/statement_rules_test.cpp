#include "core/statement_rules.hpp"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "core/error.hpp"

namespace idem::core {
namespace {

TEST(ResponseForm, NoColumnsOrNoRowIsNull) {
    EXPECT_EQ(response_form(false, 0, 0, false), ResponseForm::Null);
    // INSERT without RETURNING: rows affected, but no result columns.
    EXPECT_EQ(response_form(false, 3, 0, false), ResponseForm::Null);
    EXPECT_EQ(response_form(true, 0, 2, false), ResponseForm::Null);
    EXPECT_EQ(response_form(true, 0, 1, true), ResponseForm::Null);
}

TEST(ResponseForm, OneRow) {
    EXPECT_EQ(response_form(true, 1, 1, true), ResponseForm::ColumnValue);
    EXPECT_EQ(response_form(true, 1, 1, false), ResponseForm::RowObject);
    // Two columns, the first json: still the row as an object.
    EXPECT_EQ(response_form(true, 1, 2, true), ResponseForm::RowObject);
}

TEST(ResponseForm, SeveralRowsAreRefused) {
    EXPECT_EQ(response_form(true, 2, 1, true), ResponseForm::TooManyRows);
    EXPECT_EQ(response_form(true, 2, 3, false), ResponseForm::TooManyRows);
}

TEST(CheckParameterCount, MatchOrError) {
    EXPECT_NO_THROW(check_parameter_count(0, 0));
    EXPECT_NO_THROW(check_parameter_count(2, 2));
    try {
        check_parameter_count(1, 2);
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidParameter);
        EXPECT_STREQ(e.what(), "the statement takes 2 parameters, 1 given");
    }
    try {
        check_parameter_count(3, 1);
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_STREQ(e.what(), "the statement takes 1 parameter, 3 given");
    }
}

TEST(StatementHash, StableFnv1a) {
    // FNV-1a 64 of the empty string is its offset basis; of "a" a published test vector.
    EXPECT_EQ(statement_hash(""), 0xcbf29ce484222325ULL);
    EXPECT_EQ(statement_hash("a"), 0xaf63dc4c8601ec8cULL);
    EXPECT_NE(statement_hash("SELECT 1"), statement_hash("SELECT 2"));
}

TEST(SlotToReplace, EmptyFirstThenLeastRecentlyUsed) {
    const int idle[4] = {0, 0, 0, 0};
    std::uint64_t used[4] = {5, 0, 3, 0};
    EXPECT_EQ(slot_to_replace(used, idle, 4), 1u);
    std::uint64_t full[4] = {5, 9, 3, 7};
    EXPECT_EQ(slot_to_replace(full, idle, 4), 2u);
    std::uint64_t one[1] = {42};
    EXPECT_EQ(slot_to_replace(one, idle, 1), 0u);
}

TEST(SlotToReplace, NeverARunningStatement) {
    std::uint64_t used[4] = {5, 9, 3, 7};
    const int third_runs[4] = {0, 0, 1, 0};
    EXPECT_EQ(slot_to_replace(used, third_runs, 4), 0u);
    std::uint64_t with_empty[3] = {0, 4, 2};
    const int empty_runs[3] = {1, 0, 0};  // running: skipped, even empty
    EXPECT_EQ(slot_to_replace(with_empty, empty_runs, 3), 2u);
    const int all_run[4] = {1, 1, 1, 1};
    EXPECT_EQ(slot_to_replace(used, all_run, 4), 4u);
}

}  // namespace
}  // namespace idem::core
