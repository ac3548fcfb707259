//! Jobs and job records: find runs by identity, add runs and records in
//! batches (one statement each).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::domain::kinds::SourceFormat;
use crate::domain::posting::{ChargeFields, Existing, JobKey, RecordKind, ResolvedJob};
use crate::domain::units::Bytes;
use crate::ids::{ClusterId, JobId, JobRecordId, NodeTypeId, ProjectId};

/// The columns of a batch of job keys.
struct KeyColumns {
    cluster: Vec<i64>,
    job: Vec<String>,
    index: Vec<Option<i32>>,
    started: Vec<DateTime<Utc>>,
}

fn key_columns(keys: &[&JobKey]) -> KeyColumns {
    KeyColumns {
        cluster: keys.iter().map(|k| k.cluster_id.0).collect(),
        job: keys.iter().map(|k| k.job_id.clone()).collect(),
        index: keys.iter().map(|k| k.array_index.map(|i| i as i32)).collect(),
        started: keys.iter().map(|k| k.started_at).collect(),
    }
}

/// The ids of the runs among `keys` that are recorded: (position in `keys`, id).
///
/// Each key is looked up through `job_run_key` on its own (a LATERAL
/// subquery kept apart by OFFSET 0). As a plain join, PostgreSQL hashed the
/// whole job table for every batch while it was small enough to look cheap
/// (up to a few hundred thousand runs, or with statistics older than the
/// import): a re-import of 200,000 jobs took 7 s instead of 3 (bench).
pub async fn find(conn: &mut PgConnection, keys: &[&JobKey]) -> Result<Vec<(usize, JobId)>, sqlx::Error> {
    let c = key_columns(keys);
    let rows = sqlx::query!(
        r#"SELECT u.i AS "i!", j.id AS "id!: JobId"
             FROM UNNEST($1::bigint[], $2::text[], $3::int[], $4::timestamptz[])
                  WITH ORDINALITY AS u(cluster_id, job_id, array_index, started_at, i)
            CROSS JOIN LATERAL (
                  SELECT j.id FROM job j
                   WHERE j.cluster_id = u.cluster_id AND j.scheduler_job_id = u.job_id
                     AND coalesce(j.array_index, -1) = coalesce(u.array_index, -1)
                     AND j.started_at = u.started_at
                  OFFSET 0) j"#,
        &c.cluster,
        &c.job,
        &c.index as &[Option<i32>],
        &c.started,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.i as usize - 1, r.id)).collect())
}

/// The readings of records that changed, as they reached this ledger:
/// when the readings of 2026-12-06 came, if it held job records then
/// (migration 0049: only then can a run be recorded under an earlier
/// reading); and whether it held runs of array tasks named in their job ids
/// (`123_4`, no index) when such ids began to be read as array tasks
/// (migration 0053: only then is a record of an array task looked for
/// under that key too); when the PBS readings of 2026-12-07 came, if it
/// held job records then (migration 0056).
#[derive(Debug, Clone, Copy)]
pub struct Readings {
    pub changed: Option<DateTime<Utc>>,
    pub array_tasks_before: bool,
    pub pbs_changed: Option<DateTime<Utc>>,
    /// When Slurm's suspended time came to be read (migration 0060), if the
    /// ledger held job records then.
    pub suspension_changed: Option<DateTime<Utc>>,
}

impl Readings {
    /// Whether any reading changed while the ledger held records: only
    /// then can a run be recorded under an earlier one.
    pub fn any(&self) -> bool {
        self.changed.is_some() || self.pbs_changed.is_some() || self.suspension_changed.is_some()
    }

    /// When the given reading reached this ledger, if it held records then:
    /// only runs of jobs that ended before can be recorded without it.
    pub fn changed(&self, reading: crate::ingest::Reading) -> Option<DateTime<Utc>> {
        match reading.of() {
            crate::ingest::ReadingsOf::M0049 => self.changed,
            crate::ingest::ReadingsOf::M0056 => self.pbs_changed,
            crate::ingest::ReadingsOf::M0060 => self.suspension_changed,
        }
    }
}

pub async fn readings(conn: &mut PgConnection) -> Result<Readings, sqlx::Error> {
    let r = sqlx::query!(
        r#"SELECT (SELECT migrated_at FROM reading_change WHERE records_before) AS changed,
                  coalesce((SELECT runs_before FROM array_task_reading), false) AS "array_tasks_before!",
                  (SELECT migrated_at FROM pbs_reading_change WHERE records_before) AS pbs_changed,
                  (SELECT migrated_at FROM suspension_reading_change WHERE records_before) AS suspension_changed"#
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Readings {
        changed: r.changed,
        array_tasks_before: r.array_tasks_before,
        pbs_changed: r.pbs_changed,
        suspension_changed: r.suspension_changed,
    })
}

/// A run to look for: recorded from a record of `format` read without
/// `reading` (a read option's name).
pub struct ReadBefore<'a> {
    pub key: &'a JobKey,
    pub format: SourceFormat,
    pub reading: &'a str,
    /// The charge fingerprint of the record as read now: a run charged so is
    /// not looked for (`None`: any).
    pub unless_charged: Option<[u8; 32]>,
}

/// Which of `keys` name a run recorded from a record of the given format
/// read without the given reading of 2026-12-06 (a read option's name): a
/// jobcomp record without `jobcomp_utc` in its read options (its times read
/// in its cluster's zone), a PBS record without `pbs_hosts` (its nodes its
/// `nodect`) or without `torque_requests` (its memory not read from a `-L`
/// request), a sacct record without `slurm_totals` (no AllocNodes, a plain
/// ReqMem per node). With `unless_charged`, a run whose charging record
/// (its latest) has that charge fingerprint is not one: it is charged as
/// the record reads now. `slurm_suspended` (migration 0060) is looked for in
/// a record of any format recorded before `suspension_changed` too: every
/// export of a run charged it whole then (a jobcomp document, a sacct record
/// without `Elapsed`). Positions in `keys`; each key looked up by
/// `job_run_key`, as [`find`].
pub async fn recorded_before(
    conn: &mut PgConnection,
    keys: &[ReadBefore<'_>],
    suspension_changed: Option<DateTime<Utc>>,
) -> Result<Vec<usize>, sqlx::Error> {
    let just: Vec<&JobKey> = keys.iter().map(|k| k.key).collect();
    let c = key_columns(&just);
    let formats: Vec<String> = keys.iter().map(|k| k.format.as_str().to_owned()).collect();
    let readings: Vec<String> = keys.iter().map(|k| k.reading.to_owned()).collect();
    let charged: Vec<Option<Vec<u8>>> = keys.iter().map(|k| k.unless_charged.map(|f| f.to_vec())).collect();
    let rows = sqlx::query_scalar!(
        r#"SELECT u.i AS "i!"
             FROM UNNEST($1::bigint[], $2::text[], $3::int[], $4::timestamptz[], $5::text[], $6::text[], $7::bytea[])
                  WITH ORDINALITY AS u(cluster_id, job_id, array_index, started_at, source_format, reading, charged, i)
            CROSS JOIN LATERAL (
                  SELECT j.id FROM job j
                   WHERE j.cluster_id = u.cluster_id AND j.scheduler_job_id = u.job_id
                     AND coalesce(j.array_index, -1) = coalesce(u.array_index, -1)
                     AND j.started_at = u.started_at
                  OFFSET 0) j
            WHERE EXISTS (
                  SELECT 1 FROM job_record r
                    LEFT JOIN record_read_options o ON o.id = r.read_options_id
                   WHERE r.job_id = j.id
                     AND ((r.source_format = u.source_format
                           AND NOT coalesce((coalesce(o.options, r.read_options) ->> u.reading)::boolean, false))
                          OR (u.reading = 'slurm_suspended' AND r.recorded_at < $8)))
              AND (u.charged IS NULL
                   OR (SELECT r.charge_fingerprint FROM job_record r WHERE r.job_id = j.id
                        ORDER BY r.revision DESC LIMIT 1) IS DISTINCT FROM u.charged)"#,
        &c.cluster,
        &c.job,
        &c.index as &[Option<i32>],
        &c.started,
        &formats,
        &readings,
        &charged as &[Option<Vec<u8>>],
        suspension_changed,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|i| i as usize - 1).collect())
}

/// Add runs; returns (position in `keys`, id) of those added. Runs another
/// writer added first are left alone: find them with [`find`].
pub async fn insert(
    conn: &mut PgConnection,
    keys: &[&JobKey],
    submitted: &[Option<DateTime<Utc>>],
) -> Result<Vec<(usize, JobId)>, sqlx::Error> {
    let c = key_columns(keys);
    let rows = sqlx::query!(
        r#"INSERT INTO job (cluster_id, scheduler_job_id, array_index, submitted_at, started_at)
           SELECT * FROM UNNEST($1::bigint[], $2::text[], $3::int[], $4::timestamptz[], $5::timestamptz[])
           ON CONFLICT DO NOTHING
           RETURNING id AS "id: JobId", cluster_id, scheduler_job_id, array_index, started_at"#,
        &c.cluster,
        &c.job,
        &c.index as &[Option<i32>],
        submitted as &[Option<DateTime<Utc>>],
        &c.started,
    )
    .fetch_all(&mut *conn)
    .await?;
    let position: std::collections::HashMap<JobKey, usize> =
        keys.iter().enumerate().map(|(i, k)| ((*k).clone(), i)).collect();
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let key = JobKey {
                cluster_id: ClusterId(r.cluster_id),
                job_id: r.scheduler_job_id,
                array_index: r.array_index.map(|i| i as u32),
                started_at: r.started_at,
            };
            position.get(&key).map(|&i| (i, r.id))
        })
        .collect())
}

fn fingerprint(v: Vec<u8>) -> [u8; 32] {
    v.try_into().expect("the schema keeps fingerprints 32 bytes long")
}

/// Every record held for the given runs, looked up run by run through the
/// indexes (see [`find`] for why not as a join).
pub async fn records(conn: &mut PgConnection, jobs: &[JobId]) -> Result<Vec<(JobId, Existing)>, sqlx::Error> {
    let ids: Vec<i64> = jobs.iter().map(|j| j.0).collect();
    let rows = sqlx::query!(
        r#"SELECT r.job_id AS "job_id!: JobId", r.id AS "id!: JobRecordId", r.submitted_at, r.revision AS "revision!",
                  r.kind AS "kind!", r.charge_fingerprint AS "charge_fingerprint!",
                  r.content_fingerprint AS "content_fingerprint!", r.ended_at AS "ended_at!", r.nodes AS "nodes!",
                  r.cores AS "cores!", r.memory_bytes, r.gpus AS "gpus!", r.queue,
                  r.project_id AS "project_id!: ProjectId", r.node_type_id AS "node_type_id!: NodeTypeId",
                  r.suspended_seconds AS "suspended_seconds!"
             FROM UNNEST($1::bigint[]) AS k(id)
            CROSS JOIN LATERAL (
                  SELECT r.job_id, r.id, j.submitted_at, r.revision, r.kind, r.charge_fingerprint,
                         r.content_fingerprint, r.ended_at, r.nodes, r.cores, r.memory_bytes, r.gpus, r.queue,
                         r.project_id, r.node_type_id, r.suspended_seconds
                    FROM job j JOIN job_record r ON r.job_id = j.id
                   WHERE j.id = k.id
                  OFFSET 0) r"#,
        &ids
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.job_id,
                Existing {
                    id: r.id,
                    job_submitted_at: r.submitted_at,
                    revision: r.revision,
                    kind: RecordKind::parse(&r.kind).expect("the schema checks the kind"),
                    charge_fingerprint: fingerprint(r.charge_fingerprint),
                    content_fingerprint: fingerprint(r.content_fingerprint),
                    charge: ChargeFields {
                        ended_at: r.ended_at,
                        suspended_seconds: r.suspended_seconds as u32,
                        nodes: r.nodes as u32,
                        cores: r.cores as u32,
                        memory: r.memory_bytes.map(|m| Bytes(m as u64)),
                        gpus: r.gpus as u32,
                        queue: r.queue,
                        project_id: r.project_id,
                        node_type_id: r.node_type_id,
                    },
                },
            )
        })
        .collect())
}

/// A record to add.
pub struct NewRecord<'a> {
    pub job: JobId,
    pub revision: i32,
    pub kind: RecordKind,
    pub job_data: &'a ResolvedJob,
    pub source_format: SourceFormat,
    pub source_ref: &'a str,
    pub raw: &'a str,
    /// The bytes as received, when they were not valid UTF-8.
    pub raw_bytes: Option<&'a [u8]>,
    /// How the raw record was read (migration 0020).
    pub read_options: &'a crate::ingest::KeptOptions,
}

/// Add records in one statement; returns (run, revision, record id).
pub async fn insert_records(
    conn: &mut PgConnection,
    records: &[NewRecord<'_>],
    recorded_by: &str,
) -> Result<Vec<(JobId, i32, JobRecordId)>, sqlx::Error> {
    let col = |f: &dyn Fn(&NewRecord) -> i64| records.iter().map(f).collect::<Vec<i64>>();
    let job = col(&|r| r.job.0);
    let cluster: Vec<i64> = records.iter().map(|r| r.job_data.key.cluster_id.0).collect();
    let started: Vec<DateTime<Utc>> = records.iter().map(|r| r.job_data.key.started_at).collect();
    let revision: Vec<i32> = records.iter().map(|r| r.revision).collect();
    let kind: Vec<&str> = records.iter().map(|r| r.kind.as_str()).collect();
    let project = col(&|r| r.job_data.charge.project_id.0);
    let node_type = col(&|r| r.job_data.charge.node_type_id.0);
    let queue: Vec<Option<String>> = records.iter().map(|r| r.job_data.charge.queue.clone()).collect();
    let user: Vec<&str> = records.iter().map(|r| r.job_data.user.as_str()).collect();
    let name: Vec<&str> = records.iter().map(|r| r.job_data.job_name.as_str()).collect();
    let state: Vec<&str> = records.iter().map(|r| r.job_data.state.as_str()).collect();
    let exit: Vec<Option<String>> = records.iter().map(|r| r.job_data.exit_code.clone()).collect();
    let ended: Vec<DateTime<Utc>> = records.iter().map(|r| r.job_data.charge.ended_at).collect();
    let nodes: Vec<i32> = records.iter().map(|r| r.job_data.charge.nodes as i32).collect();
    let cores: Vec<i32> = records.iter().map(|r| r.job_data.charge.cores as i32).collect();
    let memory: Vec<Option<i64>> = records
        .iter()
        .map(|r| r.job_data.charge.memory.map(|m| m.0 as i64))
        .collect();
    let gpus: Vec<i32> = records.iter().map(|r| r.job_data.charge.gpus as i32).collect();
    let suspended: Vec<i32> = records
        .iter()
        .map(|r| r.job_data.charge.suspended_seconds as i32)
        .collect();
    let charge_fp: Vec<Vec<u8>> = records.iter().map(|r| r.job_data.charge_fingerprint.to_vec()).collect();
    let content_fp: Vec<Vec<u8>> = records
        .iter()
        .map(|r| r.job_data.content_fingerprint.to_vec())
        .collect();
    let format: Vec<SourceFormat> = records.iter().map(|r| r.source_format).collect();
    let source: Vec<&str> = records.iter().map(|r| r.source_ref).collect();
    let raw: Vec<&str> = records.iter().map(|r| r.raw).collect();
    let raw_bytes: Vec<Option<&[u8]>> = records.iter().map(|r| r.raw_bytes).collect();
    // Each distinct set of read options once (a file's records share one),
    // and for every record the position of its own (migration 0043). The
    // sets in the order of their text: two postings that both bring the
    // same new sets store them in the same order, so neither waits for a
    // set the other is waiting to store after it.
    let sets: BTreeMap<&str, &serde_json::Value> = records
        .iter()
        .map(|r| (r.read_options.text(), r.read_options.json()))
        .collect();
    let at: HashMap<&str, i32> = sets.keys().enumerate().map(|(i, k)| (*k, i as i32 + 1)).collect();
    let option_at: Vec<i32> = records.iter().map(|r| at[r.read_options.text()]).collect();
    let distinct: Vec<serde_json::Value> = sets.into_values().cloned().collect();
    let rows = sqlx::query!(
        r#"WITH o AS (SELECT array_agg(hl_read_options_id(x) ORDER BY n) AS ids
                        FROM unnest($25::jsonb[]) WITH ORDINALITY AS t(x, n))
           INSERT INTO job_record (job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, queue,
                                   user_name, job_name, state, exit_code, ended_at, nodes, cores, memory_bytes, gpus,
                                   charge_fingerprint, content_fingerprint, source_format, source_ref, raw, raw_bytes,
                                   read_options_id, recorded_by, suspended_seconds)
           SELECT u.job_id, u.cluster_id, u.started_at, u.revision, u.kind, u.project_id, u.node_type_id, u.queue,
                  u.user_name, u.job_name, u.state, u.exit_code, u.ended_at, u.nodes, u.cores, u.memory_bytes, u.gpus,
                  u.charge_fingerprint, u.content_fingerprint, u.source_format, u.source_ref, u.raw, u.raw_bytes,
                  (SELECT o.ids FROM o)[u.options_at], $22, u.suspended_seconds
             FROM UNNEST($1::bigint[], $2::bigint[], $3::timestamptz[], $4::int[], $5::text[],
                         $6::bigint[], $7::bigint[], $8::text[], $9::text[], $10::text[], $11::text[],
                         $12::text[], $13::timestamptz[], $14::int[], $15::int[], $16::bigint[],
                         $17::int[], $18::bytea[], $19::bytea[], $20::text[], $21::text[], $23::text[],
                         $24::bytea[], $26::int[], $27::int[])
                  AS u(job_id, cluster_id, started_at, revision, kind, project_id, node_type_id, queue,
                       user_name, job_name, state, exit_code, ended_at, nodes, cores, memory_bytes, gpus,
                       charge_fingerprint, content_fingerprint, source_format, source_ref, raw, raw_bytes, options_at,
                       suspended_seconds)
           RETURNING job_id AS "job_id: JobId", revision, id AS "id: JobRecordId""#,
        &job,
        &cluster,
        &started,
        &revision,
        &kind as &[&str],
        &project,
        &node_type,
        &queue as &[Option<String>],
        &user as &[&str],
        &name as &[&str],
        &state as &[&str],
        &exit as &[Option<String>],
        &ended,
        &nodes,
        &cores,
        &memory as &[Option<i64>],
        &gpus,
        &charge_fp,
        &content_fp,
        &format as &[SourceFormat],
        &source as &[&str],
        recorded_by,
        &raw as &[&str],
        &raw_bytes as &[Option<&[u8]>],
        &distinct,
        &option_at,
        &suspended,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.job_id, r.revision, r.id)).collect())
}

/// Jobs ever recorded for a cluster (for tests and summaries).
pub async fn count(conn: &mut PgConnection, cluster: ClusterId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM job WHERE cluster_id = $1"#,
        cluster as ClusterId
    )
    .fetch_one(&mut *conn)
    .await
}
