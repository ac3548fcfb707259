-- The planner's statistics kept for the columns queries look rows up,
-- join or group by, not for the ones they only carry (issue 19, item 5:
-- the import and the storage billing against their floors).
--
-- A recording or billing run that writes a tenth of a table or more
-- ANALYZEs it as it finishes (hl_refresh_statistics, 0019), and autovacuum
-- does the same later: ANALYZE reads a sample of 30,000 rows and sorts
-- each column's values in it. The columns below are carried, not looked
-- up: nothing joins on them; the audit compares them with values it
-- recomputes (no statistics are used for that); the fingerprints are
-- looked up through the unique key they end, whose other column is
-- estimated. Two queries do use them, where the defaults serve as well:
-- a statement's lines are grouped by unit rate (a few rates a project),
-- and `refund` looks for the same refund by its amount and reason among
-- one project's entries of a kind. A target of 0 leaves them out of
-- ANALYZE. Measured on the default
-- `bench`'s ledger (1.27M entries, Intel Xeon, PostgreSQL 15): ANALYZE of
-- ledger_entry 232 → 141 ms, job_record 398 → 252 ms, ledger_usage 161 →
-- 79 ms; the storage billing run spent 606 ms of its 1.2 s analyzing.
--
-- In a new database, estimates for these columns are PostgreSQL's
-- defaults (an equality selects 0.5 % of rows, a grouping 200 groups). In
-- one migrated from before, the statistics already gathered for them stay
-- as they were (ANALYZE no longer updates them, and only a superuser may
-- delete them): harmless, as nothing depends on them. The key columns
-- keep the default target (100).

ALTER TABLE ledger_entry
    ALTER COLUMN quantity SET STATISTICS 0,
    ALTER COLUMN unit_rate SET STATISTICS 0,
    ALTER COLUMN amount_exact SET STATISTICS 0,
    ALTER COLUMN amount SET STATISTICS 0,
    ALTER COLUMN author SET STATISTICS 0,
    ALTER COLUMN reason SET STATISTICS 0,
    ALTER COLUMN seal_digest SET STATISTICS 0;

ALTER TABLE job_record
    ALTER COLUMN job_name SET STATISTICS 0,
    ALTER COLUMN exit_code SET STATISTICS 0,
    ALTER COLUMN charge_fingerprint SET STATISTICS 0,
    ALTER COLUMN content_fingerprint SET STATISTICS 0,
    ALTER COLUMN source_ref SET STATISTICS 0,
    ALTER COLUMN raw SET STATISTICS 0,
    ALTER COLUMN raw_bytes SET STATISTICS 0,
    ALTER COLUMN read_options SET STATISTICS 0,
    ALTER COLUMN recorded_at SET STATISTICS 0,
    ALTER COLUMN recorded_by SET STATISTICS 0;

ALTER TABLE ledger_usage
    ALTER COLUMN jobs SET STATISTICS 0,
    ALTER COLUMN core_hours SET STATISTICS 0,
    ALTER COLUMN gpu_hours SET STATISTICS 0,
    ALTER COLUMN tb_months SET STATISTICS 0,
    ALTER COLUMN amount SET STATISTICS 0,
    ALTER COLUMN entries SET STATISTICS 0;

ALTER TABLE ledger_draw
    ALTER COLUMN amount SET STATISTICS 0,
    ALTER COLUMN entries SET STATISTICS 0;

ALTER TABLE storage_charge_segment
    ALTER COLUMN quota_tb SET STATISTICS 0,
    ALTER COLUMN tb_month_price SET STATISTICS 0;
