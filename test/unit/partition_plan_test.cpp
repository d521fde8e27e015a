#include "core/partition_plan.hpp"

#include <gtest/gtest.h>

using namespace idem::core;

namespace {
constexpr int64_t kHour = 3600 * kUsecsPerSecond;
constexpr int64_t kDay = kUsecsPerDay;
}  // namespace

TEST(PartitionPlan, BucketStartFloors) {
    EXPECT_EQ(bucket_start(0, kDay), 0);
    EXPECT_EQ(bucket_start(kDay - 1, kDay), 0);
    EXPECT_EQ(bucket_start(kDay, kDay), kDay);
    EXPECT_EQ(bucket_start(-1, kDay), -kDay);
}

TEST(PartitionPlan, UncoveredFindsGaps) {
    std::vector<TimeRange> existing = {{10, 20}, {30, 40}};
    auto gaps = uncovered({0, 50}, existing);
    ASSERT_EQ(gaps.size(), 3u);
    EXPECT_EQ(gaps[0].lo, 0);
    EXPECT_EQ(gaps[0].hi, 10);
    EXPECT_EQ(gaps[1].lo, 20);
    EXPECT_EQ(gaps[1].hi, 30);
    EXPECT_EQ(gaps[2].lo, 40);
    EXPECT_EQ(gaps[2].hi, 50);
    EXPECT_TRUE(uncovered({12, 18}, existing).empty());
    auto partial = uncovered({15, 35}, existing);
    ASSERT_EQ(partial.size(), 1u);
    EXPECT_EQ(partial[0].lo, 20);
    EXPECT_EQ(partial[0].hi, 30);
}

TEST(PartitionPlan, PremakesCurrentAndFutureBuckets) {
    PlanInput in{10 * kDay + 5 * kHour, kDay, 2, {}, {}, 100};
    Plan plan = plan_partitions(in);
    ASSERT_EQ(plan.create.size(), 3u);
    EXPECT_EQ(plan.create[0].lo, 10 * kDay);
    EXPECT_EQ(plan.create[2].hi, 13 * kDay);
    EXPECT_TRUE(plan.drop.empty());
}

TEST(PartitionPlan, DropsOnlyPartitionsWhoseUpperBoundPassed) {
    int64_t now = 10 * kDay + 5 * kHour;
    PlanInput in{now,
                 kDay,
                 0,
                 {{8 * kDay, 9 * kDay},
                  {9 * kDay, 10 * kDay},
                  {10 * kDay, 11 * kDay},
                  {-kUnbounded, 7 * kDay},
                  {11 * kDay, kUnbounded}},
                 {},
                 100};
    Plan plan = plan_partitions(in);
    ASSERT_EQ(plan.drop.size(), 3u);
    EXPECT_EQ(plan.drop[0], 0u);
    EXPECT_EQ(plan.drop[1], 1u);
    EXPECT_EQ(plan.drop[2], 3u);
    EXPECT_TRUE(plan.create.empty());
    EXPECT_TRUE(due_to_drop({0, now}, now));  // hi == now: every row expired
    EXPECT_FALSE(due_to_drop({0, now + 1}, now));
}

TEST(PartitionPlan, CreatesBucketsForLiveDefaultRowsOnly) {
    int64_t now = 10 * kDay;
    PlanInput in{now, kDay, 0, {{10 * kDay, 11 * kDay}}, {5 * kDay, 20 * kDay, 9 * kDay}, 100};
    Plan plan = plan_partitions(in);
    ASSERT_EQ(plan.create.size(), 1u);  // the expired buckets 5 and 9 are not created
    EXPECT_EQ(plan.create[0].lo, 20 * kDay);
}

TEST(PartitionPlan, FillsOnlyGapsWhenWidthChanged) {
    // Half-day partitions exist; the width is now a day.
    PlanInput in{10 * kDay, kDay, 0, {{10 * kDay, 10 * kDay + 12 * kHour}}, {}, 100};
    Plan plan = plan_partitions(in);
    ASSERT_EQ(plan.create.size(), 1u);
    EXPECT_EQ(plan.create[0].lo, 10 * kDay + 12 * kHour);
    EXPECT_EQ(plan.create[0].hi, 11 * kDay);
}

TEST(PartitionPlan, CapsCreationsPerRun) {
    PlanInput in{0, kUsecsPerSecond, 10, {}, {}, 4};
    Plan plan = plan_partitions(in);
    EXPECT_EQ(plan.create.size(), 4u);
    EXPECT_TRUE(plan.capped);
}

TEST(PartitionPlan, SuffixMatchesPartmanFormats) {
    // 2026-11-21 is 9821 days after 2000-01-01.
    int64_t day = 9821 * kDay;
    EXPECT_EQ(partition_suffix(day, kDay), "2026_11_21");
    EXPECT_EQ(partition_suffix(day + 13 * kHour, kHour), "2026_11_21_1300");
    EXPECT_EQ(partition_suffix(day + 13 * kHour + 7 * kUsecsPerSecond, kUsecsPerSecond),
              "2026_11_21_130007");
    // A start the width's format cannot show gets a finer one.
    EXPECT_EQ(partition_suffix(day + 12 * kHour, kDay), "2026_11_21_1200");
    EXPECT_EQ(partition_suffix(0, kDay), "2000_01_01");
    EXPECT_EQ(partition_suffix(-kDay, kDay), "1999_12_31");
    EXPECT_EQ(partition_suffix(day + 29 * kUsecsPerDay + 17 * kUsecsPerDay, kDay), "2027_01_06");
    EXPECT_STREQ(partman_datetime_format(kDay), "YYYY_MM_DD");
    EXPECT_STREQ(partman_datetime_format(kHour), "YYYY_MM_DD_HH24MI");
    EXPECT_STREQ(partman_datetime_format(kUsecsPerSecond), "YYYY_MM_DD_HH24MISS");
}

TEST(PartitionPlan, SuffixMatchesPartman5Formats) {
    constexpr auto k5 = PartitionNaming::kPartman5;
    int64_t day = 9821 * kDay;  // 2026-11-21
    EXPECT_EQ(partition_suffix(day, kDay, k5), "20261121");
    EXPECT_EQ(partition_suffix(day, 7 * kDay, k5), "20261121");
    // Below a day, 5.x always shows seconds (4.x shows minutes for widths of a minute or more).
    EXPECT_EQ(partition_suffix(day + 13 * kHour, kHour, k5), "20261121_130000");
    EXPECT_EQ(partition_suffix(day + 13 * kHour + 7 * kUsecsPerSecond, kUsecsPerSecond, k5),
              "20261121_130007");
    // A start the width's format cannot show gets a finer one, as with 4.x.
    EXPECT_EQ(partition_suffix(day + 12 * kHour, kDay, k5), "20261121_120000");
    EXPECT_EQ(partition_suffix(day + 1, kUsecsPerSecond, k5), "20261121_000000_000001");
    EXPECT_EQ(partition_suffix(-kDay, kDay, k5), "19991231");
    // The default stays 4.x's, which maintain() uses for its own partitions.
    EXPECT_EQ(partition_suffix(day, kDay), partition_suffix(day, kDay, PartitionNaming::kPartman4));
}

TEST(PartitionPlan, IsBucketMeansOneAlignedWidthSlot) {
    EXPECT_TRUE(is_bucket({3 * kDay, 4 * kDay}, kDay));
    EXPECT_TRUE(is_bucket({-kDay, 0}, kDay));
    EXPECT_FALSE(is_bucket({3 * kDay, 5 * kDay}, kDay));                  // two slots
    EXPECT_FALSE(is_bucket({3 * kDay + kHour, 4 * kDay + kHour}, kDay));  // not aligned
    EXPECT_FALSE(is_bucket({-kDay + kHour, kHour}, kDay));                // not aligned, negative
    EXPECT_FALSE(is_bucket({-kUnbounded, kDay}, kDay));                   // MINVALUE
    EXPECT_FALSE(is_bucket({0, kUnbounded}, kDay));                       // MAXVALUE
    EXPECT_TRUE(is_bucket({5 * kHour, 6 * kHour}, kHour));
}

TEST(PartitionPlan, NegativePremakePlansDefaultBucketsOnly) {
    PlanInput in{10 * kDay + 5 * kHour, kDay, -1, {{10 * kDay, 11 * kDay}}, {14 * kDay}, 100};
    Plan plan = plan_partitions(in);
    ASSERT_EQ(plan.create.size(), 1u);
    EXPECT_EQ(plan.create[0].lo, 14 * kDay);
    EXPECT_EQ(plan.create[0].hi, 15 * kDay);
    in.default_buckets.clear();
    EXPECT_TRUE(plan_partitions(in).create.empty());
}
