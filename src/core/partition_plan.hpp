// Time-partition arithmetic for idempotency.keys (partitioned by expires_at): which ranges
// to create, which partitions may be dropped, and what each partition is called.
// Times are microseconds since 2000-01-01 00:00 UTC (PostgreSQL's epoch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace idem::core {

// [lo, hi): lo may be kUnbounded's negative (MINVALUE), hi kUnbounded (MAXVALUE).
struct TimeRange {
    int64_t lo;
    int64_t hi;
};
constexpr int64_t kUnbounded = INT64_MAX;
constexpr int64_t kUsecsPerSecond = 1000000;
constexpr int64_t kUsecsPerDay = 86400 * kUsecsPerSecond;

// Start of the width-aligned bucket holding t (floor division: right for negative t too).
int64_t bucket_start(int64_t t, int64_t width);

// The parts of `want` that no range of `existing` covers, in ascending order.
std::vector<TimeRange> uncovered(TimeRange want, const std::vector<TimeRange> &existing);

struct PlanInput {
    int64_t now;
    int64_t width;                         // > 0
    int premake;                           // future buckets kept ready beyond the current one
    std::vector<TimeRange> existing;       // attached partitions except the default
    std::vector<int64_t> default_buckets;  // bucket starts of live rows in the default partition
    int max_creates;                       // cap per run; the rest waits for the next run
};

struct Plan {
    std::vector<TimeRange> create;  // ascending, non-overlapping, not overlapping `existing`
    std::vector<size_t> drop;       // indexes into PlanInput::existing
    bool capped = false;            // some ranges were left for the next run
};

// A partition may be dropped once its upper bound has passed: every row in it has
// expires_at < hi <= now, i.e. is past its retention.
inline bool due_to_drop(TimeRange r, int64_t now) {
    return r.hi != kUnbounded && r.hi <= now;
}

// True when r is exactly one width-slot [k*width, (k+1)*width) (bounded on both sides).
inline bool is_bucket(TimeRange r, int64_t width) {
    return r.lo != -kUnbounded && r.hi != kUnbounded && r.hi - r.lo == width &&
           r.lo - (r.lo / width) * width == 0;
}

// premake < 0: only the buckets of default_buckets (no current or future ones).
Plan plan_partitions(const PlanInput &in);

// How partitions are named. maintain() names its own partitions the way pg_partman 4.x does,
// so a hand-off to 4.x recognises them; 5.x changed the format, and use_partman() renames the
// existing partitions to it when handing over to 5.x.
enum class PartitionNaming { kPartman4, kPartman5 };

// Name suffix of a partition starting at lo, in that pg_partman's format for the width.
//   4.x: YYYY_MM_DD for widths of a day or more, YYYY_MM_DD_HH24MI below a day,
//        YYYY_MM_DD_HH24MISS below a minute;
//   5.x: YYYYMMDD for a day or more, YYYYMMDD_HH24MISS below a day.
// A start the format cannot show exactly gets a finer format, so distinct starts never share a
// name.
std::string partition_suffix(int64_t lo, int64_t width,
                             PartitionNaming naming = PartitionNaming::kPartman4);

// pg_partman 4.x's datetime_string for the width (as stored in partman.part_config).
const char *partman_datetime_format(int64_t width);

}  // namespace idem::core
