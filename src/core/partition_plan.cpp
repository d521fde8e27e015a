#include "core/partition_plan.hpp"

#include <algorithm>
#include <cstdio>

#include "core/no_postgres.hpp"

namespace idem::core {

int64_t bucket_start(int64_t t, int64_t width) {
    int64_t q = t / width;
    if (t % width != 0 && t < 0) q--;
    return q * width;
}

std::vector<TimeRange> uncovered(TimeRange want, const std::vector<TimeRange> &existing) {
    std::vector<TimeRange> sorted(existing);
    std::sort(sorted.begin(), sorted.end(),
              [](const TimeRange &a, const TimeRange &b) { return a.lo < b.lo; });
    std::vector<TimeRange> gaps;
    int64_t cursor = want.lo;
    for (const TimeRange &r : sorted) {
        if (r.hi <= cursor) continue;
        if (r.lo >= want.hi) break;
        if (r.lo > cursor) gaps.push_back({cursor, r.lo});
        cursor = std::max(cursor, r.hi);
        if (cursor >= want.hi) break;
    }
    if (cursor < want.hi) gaps.push_back({cursor, want.hi});
    return gaps;
}

Plan plan_partitions(const PlanInput &in) {
    Plan plan;
    for (size_t i = 0; i < in.existing.size(); i++)
        if (due_to_drop(in.existing[i], in.now)) plan.drop.push_back(i);

    std::vector<int64_t> buckets;
    int64_t current = bucket_start(in.now, in.width);
    for (int k = 0; k <= in.premake; k++) buckets.push_back(current + k * in.width);
    for (int64_t b : in.default_buckets)
        if (b + in.width > in.now) buckets.push_back(b);
    std::sort(buckets.begin(), buckets.end());
    buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());

    std::vector<TimeRange> covered(in.existing);
    for (int64_t b : buckets) {
        for (const TimeRange &gap : uncovered({b, b + in.width}, covered)) {
            if (int(plan.create.size()) >= in.max_creates) {
                plan.capped = true;
                return plan;
            }
            plan.create.push_back(gap);
            covered.push_back(gap);
        }
    }
    return plan;
}

namespace {

// Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
void civil_from_days(int64_t z, int *year, int *month, int *day) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *day = int(doy - (153 * mp + 2) / 5 + 1);
    *month = int(mp < 10 ? mp + 3 : mp - 9);
    *year = int(yoe + era * 400 + (*month <= 2 ? 1 : 0));
}

}  // namespace

const char *partman_datetime_format(int64_t width) {
    if (width >= kUsecsPerDay) return "YYYY_MM_DD";
    if (width >= 60 * kUsecsPerSecond) return "YYYY_MM_DD_HH24MI";
    return "YYYY_MM_DD_HH24MISS";
}

std::string partition_suffix(int64_t lo, int64_t width, PartitionNaming naming) {
    constexpr int64_t kPgEpochDays = 10957;  // 1970-01-01 to 2000-01-01
    int64_t day = bucket_start(lo, kUsecsPerDay);
    int64_t in_day = lo - day;
    int year, month, mday;
    civil_from_days(day / kUsecsPerDay + kPgEpochDays, &year, &month, &mday);
    int64_t secs = in_day / kUsecsPerSecond;
    int hour = int(secs / 3600), minute = int(secs / 60 % 60), second = int(secs % 60);
    long long micros = in_day % kUsecsPerSecond;
    bool whole_day = in_day == 0, whole_minute = in_day % (60 * kUsecsPerSecond) == 0;
    const char *sep = naming == PartitionNaming::kPartman4 ? "_" : "";
    char date[40], buf[80];
    std::snprintf(date, sizeof date, "%04d%s%02d%s%02d", year, sep, month, sep, mday);
    if (width >= kUsecsPerDay && whole_day)
        std::snprintf(buf, sizeof buf, "%s", date);
    else if (naming == PartitionNaming::kPartman4 && width >= 60 * kUsecsPerSecond && whole_minute)
        std::snprintf(buf, sizeof buf, "%s_%02d%02d", date, hour, minute);
    else if (micros == 0)
        std::snprintf(buf, sizeof buf, "%s_%02d%02d%02d", date, hour, minute, second);
    else
        std::snprintf(buf, sizeof buf, "%s_%02d%02d%02d_%06lld", date, hour, minute, second,
                      micros);
    return buf;
}

}  // namespace idem::core
