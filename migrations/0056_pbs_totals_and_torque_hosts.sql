-- Two readings of PBS records changed on 2026-12-07 (docs/pbs.md, "What a
-- job held"; docs/rules.md):
--
-- * PBS Pro: a job sized by its `select` holds at least its
--   `Resource_List.ncpus` cores, `Resource_List.mem` memory and
--   `Resource_List.ngpus` GPUs. The server fills each chunk's missing
--   resources from `default_chunk` and sums them into those totals, while
--   `select` keeps what the user wrote: `select=1:mpiprocs=36` with
--   `Resource_List.ncpus=36` was charged as 1 core (read option
--   `pbs_totals`).
-- * TORQUE: a job sized by `nodes=` is on the distinct hosts of its
--   `exec_host` when they are fewer than `nodect` and hold every slot the
--   spec asks for (Maui and Moab match `N:ppn=P` to N × P slots, at least P
--   a host): `nodes=14:ppn=8+16:ppn=1` ran on 17 hosts and was charged 30
--   nodes (read option `torque_hosts`).
--
-- Records read before keep their reading (their read options lack the new
-- option), and a record of a run recorded under the earlier reading is read
-- that way again (`Recorder::earlier_readings`), so that nothing is charged
-- twice or flagged. As with migration 0049, this row says whether the
-- ledger held job records when the change reached it, and when: only then,
-- and only for jobs that ended before then (and a day), does the recorder
-- look. A `serve` or `import --follow` started before this migration still
-- reads the old way until it is restarted: stop them, migrate, start them
-- again (docs/slurm.md).

CREATE TABLE pbs_reading_change (
    id             integer PRIMARY KEY CHECK (id = 1),
    migrated_at    timestamptz NOT NULL,
    records_before boolean NOT NULL
);
COMMENT ON TABLE pbs_reading_change IS
    'When the PBS readings of 2026-12-07 (PBS Pro select sized at least by Resource_List totals, TORQUE nodes= on the hosts it ran on) reached this ledger, and whether it held job records then (records read before keep their reading; docs/rules.md).';

INSERT INTO pbs_reading_change (id, migrated_at, records_before)
SELECT 1, now(), EXISTS (SELECT 1 FROM job_record);

-- Every role that records reads it, also one made by hand after this
-- migration: it holds no secret (an instant and a yes or no).
GRANT SELECT ON pbs_reading_change TO PUBLIC;
