-- Settings are checked when set, and a refused value leaves the setting as it was.
-- PostgreSQL 16 and later print the range with its unit (setting_bounds_1.out).
SET idempotency.partition_width = '1d';
SET idempotency.partition_width = '0';
SET idempotency.partition_width = '1 day';
SHOW idempotency.partition_width;
