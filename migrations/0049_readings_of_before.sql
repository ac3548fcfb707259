-- Two readings of scheduler records changed on 2026-12-06: jobcomp's
-- zone-less times are UTC (Slurm writes them with gmtime; they were read in
-- the cluster's zone), and a PBS Pro job sized by its `select` is on the
-- hosts it ran on (it was on `nodect`, which counts chunks). Records read
-- before keep their reading (their read options lack `jobcomp_utc`,
-- `pbs_hosts`), and a record of a run recorded under the earlier reading is
-- read that way again (`Recorder::earlier_readings`), so that nothing is
-- charged twice or flagged.
--
-- Looking for such runs costs a lookup per record of a batch; a ledger that
-- held no job record when it was migrated has none to find. This row says
-- which this ledger is, and when: the recorder looks only if it held
-- records, and only for jobs that ended before then (and a day, the widest
-- zone offset twice over). A `serve` or `import --follow` started before
-- this migration still reads the old way until it is restarted: stop them,
-- migrate, start them again (docs/slurm.md).

CREATE TABLE reading_change (
    id             integer PRIMARY KEY CHECK (id = 1),
    migrated_at    timestamptz NOT NULL,
    records_before boolean NOT NULL
);
COMMENT ON TABLE reading_change IS
    'When the readings of 2026-12-06 (jobcomp times in UTC, PBS Pro jobs on the hosts they ran on) reached this ledger, and whether it held job records then (records read before keep their reading; docs/rules.md).';

INSERT INTO reading_change (id, migrated_at, records_before)
SELECT 1, now(), EXISTS (SELECT 1 FROM job_record);

-- Every role that records reads it, also one made by hand after this
-- migration: it holds no secret (an instant and a yes or no).
GRANT SELECT ON reading_change TO PUBLIC;
