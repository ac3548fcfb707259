//! Which rules apply to a job: its node type (docs/rules.md D4) and the dated rate card
//! in force at its pricing instant (docs/rules.md D5).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// The scheduler family of a cluster: decides how its logs are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    Slurm,
    Pbs,
}

impl Scheduler {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheduler::Slurm => "slurm",
            Scheduler::Pbs => "pbs",
        }
    }

    pub fn parse(s: &str) -> Option<Scheduler> {
        match s {
            "slurm" => Some(Scheduler::Slurm),
            "pbs" => Some(Scheduler::Pbs),
            _ => None,
        }
    }
}

/// Something that is in force from `valid_from` (inclusive) until
/// `valid_until` (exclusive; `None` = until further notice).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dated<T> {
    pub valid_from: DateTime<Utc>,
    pub valid_until: Option<DateTime<Utc>>,
    pub value: T,
}

impl<T> Dated<T> {
    pub fn in_force_at(&self, t: DateTime<Utc>) -> bool {
        self.valid_from <= t && self.valid_until.is_none_or(|u| t < u)
    }

    /// Whether two periods share an instant.
    pub fn overlaps<U>(&self, other: &Dated<U>) -> bool {
        let a_before_b_ends = other.valid_until.is_none_or(|u| self.valid_from < u);
        let b_before_a_ends = self.valid_until.is_none_or(|u| other.valid_from < u);
        a_before_b_ends && b_before_a_ends
    }
}

/// The one item of `items` in force at `t`, if any. Items never overlap (the
/// database refuses overlapping rows), so the first match is the only one.
pub fn in_force_at<T>(items: &[Dated<T>], t: DateTime<Utc>) -> Option<&Dated<T>> {
    items.iter().find(|d| d.in_force_at(t))
}

/// The instant whose rules price a job (docs/rules.md D5): its submit time, or its
/// start time when the submit time is unknown.
pub fn pricing_instant(submitted: Option<DateTime<Utc>>, started: DateTime<Utc>) -> DateTime<Utc> {
    submitted.unwrap_or(started)
}

/// The node type every GPU job without a queue mapping falls into (docs/rules.md D4).
pub const GPU_NODE_TYPE: &str = "gpu";

/// Why a job's node type cannot be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeTypeError {
    #[error("unknown queue {queue:?} on cluster {cluster}{hint}: map it to a node type in the center configuration")]
    UnknownQueue {
        cluster: String,
        queue: String,
        hint: String,
    },
    #[error(
        "queue {queue:?} on cluster {cluster} left the queue map at {ended}, before the job started ({at}): give the \
         job's node type (`--node-type`, a JSON line's `node_type`), or map the queue again in the center \
         configuration for jobs from then on"
    )]
    QueueEnded {
        cluster: String,
        queue: String,
        ended: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    #[error("unknown node type {node_type:?} on cluster {cluster}")]
    UnknownNodeType { cluster: String, node_type: String },
    #[error("the job names neither a queue nor a node type")]
    Missing,
}

/// A cluster's queue map: each queue's node type names, dated (docs/rules.md
/// D4), oldest first; no two of one queue in force at one instant.
pub type QueueMap = BTreeMap<String, Vec<Dated<String>>>;

/// The node type a queue runs on at `t`, if it is mapped then.
pub fn queue_node_type<'a>(queue_map: &'a QueueMap, queue: &str, t: DateTime<Utc>) -> Option<&'a str> {
    queue_map
        .get(queue)
        .and_then(|rows| in_force_at(rows, t))
        .map(|d| d.value.as_str())
}

/// Decide a job's node type (docs/rules.md D4): an explicit node type wins; else its
/// queue through the cluster's mapping in force when the job started, `at`;
/// a GPU job whose queue has no mapping then (or that names no queue) is a
/// `gpu` job if the cluster has that type. An unknown queue is an error,
/// never a silent default.
pub fn resolve_node_type<'a>(
    cluster: &str,
    queue_map: &'a QueueMap,
    node_types: &[&'a str],
    queue: Option<&str>,
    explicit: Option<&'a str>,
    gpus: u32,
    at: DateTime<Utc>,
) -> Result<&'a str, NodeTypeError> {
    let known = |name: &str| node_types.iter().copied().find(|t| *t == name);
    if let Some(t) = explicit {
        return known(t).ok_or_else(|| NodeTypeError::UnknownNodeType {
            cluster: cluster.to_owned(),
            node_type: t.to_owned(),
        });
    }
    if let Some(t) = queue.and_then(|q| queue_node_type(queue_map, q, at)) {
        return Ok(t);
    }
    if gpus > 0
        && let Some(t) = known(GPU_NODE_TYPE)
    {
        return Ok(t);
    }
    // A queue mapped once, but not at `at`: it left the map before the job.
    let ended = queue
        .and_then(|q| queue_map.get(q))
        .and_then(|rows| rows.iter().filter_map(|d| d.valid_until).filter(|u| *u <= at).max());
    match (queue, ended) {
        (Some(q), Some(ended)) => Err(NodeTypeError::QueueEnded {
            cluster: cluster.to_owned(),
            queue: q.to_owned(),
            ended,
            at,
        }),
        (Some(q), None) => Err(NodeTypeError::UnknownQueue {
            cluster: cluster.to_owned(),
            queue: q.to_owned(),
            hint: crate::domain::names::did_you_mean(
                q,
                queue_map
                    .iter()
                    .filter(|(_, rows)| in_force_at(rows, at).is_some())
                    .map(|(q, _)| q.as_str()),
            ),
        }),
        (None, _) => Err(NodeTypeError::Missing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn card(from: &str, until: Option<&str>, v: u32) -> Dated<u32> {
        Dated {
            valid_from: at(from),
            valid_until: until.map(at),
            value: v,
        }
    }

    #[test]
    fn the_card_in_force_is_the_one_whose_period_contains_the_instant() {
        let cards = [
            card("2026-01-01T00:00:00Z", Some("2026-07-01T00:00:00Z"), 1),
            card("2026-07-01T00:00:00Z", None, 2),
        ];
        let value = |t: &str| in_force_at(&cards, at(t)).map(|c| c.value);
        assert_eq!(value("2025-12-31T23:59:59Z"), None);
        assert_eq!(value("2026-01-01T00:00:00Z"), Some(1));
        assert_eq!(value("2026-06-30T23:59:59Z"), Some(1));
        assert_eq!(value("2026-07-01T00:00:00Z"), Some(2));
        assert_eq!(value("2099-01-01T00:00:00Z"), Some(2));
    }

    #[test]
    fn a_job_is_priced_at_its_submit_time_else_its_start_time() {
        let submit = at("2026-06-30T23:00:00Z");
        let start = at("2026-07-01T01:00:00Z");
        assert_eq!(pricing_instant(Some(submit), start), submit);
        assert_eq!(pricing_instant(None, start), start);
    }

    #[test]
    fn overlap_is_symmetric_and_half_open() {
        let a = card("2026-01-01T00:00:00Z", Some("2026-07-01T00:00:00Z"), 1);
        let b = card("2026-07-01T00:00:00Z", None, 2);
        let c = card("2026-06-01T00:00:00Z", None, 3);
        assert!(!a.overlaps(&b) && !b.overlaps(&a));
        assert!(a.overlaps(&c) && c.overlaps(&a));
        assert!(b.overlaps(&c));
    }

    fn always(t: &str) -> Vec<Dated<String>> {
        vec![Dated {
            valid_from: DateTime::<Utc>::MIN_UTC,
            valid_until: None,
            value: t.to_owned(),
        }]
    }

    #[test]
    fn node_type_comes_from_explicit_type_then_queue_then_gpus() {
        let map: QueueMap = [("batch", "regular"), ("bigmem", "hugememory")]
            .into_iter()
            .map(|(q, t)| (q.to_owned(), always(t)))
            .collect();
        let types = ["regular", "hugememory", "gpu"];
        let t = at("2026-03-01T00:00:00Z");
        let resolve = |queue, explicit, gpus| resolve_node_type("c1", &map, &types, queue, explicit, gpus, t);
        assert_eq!(resolve(Some("batch"), None, 0), Ok("regular"));
        assert_eq!(resolve(Some("bigmem"), None, 0), Ok("hugememory"));
        assert_eq!(resolve(Some("batch"), Some("gpu"), 0), Ok("gpu"));
        assert_eq!(
            resolve(Some("batch"), None, 2),
            Ok("regular"),
            "the mapping wins over GPUs"
        );
        assert_eq!(resolve(Some("gpuq"), None, 2), Ok("gpu"));
        assert_eq!(resolve(None, None, 1), Ok("gpu"));
        assert_eq!(
            resolve(Some("debug"), None, 0),
            Err(NodeTypeError::UnknownQueue {
                cluster: "c1".into(),
                queue: "debug".into(),
                hint: String::new(),
            })
        );
        assert_eq!(resolve(None, None, 0), Err(NodeTypeError::Missing));
        assert!(matches!(
            resolve(None, Some("fpga"), 0),
            Err(NodeTypeError::UnknownNodeType { .. })
        ));
    }

    #[test]
    fn a_gpu_job_needs_a_gpu_type_when_its_queue_is_unmapped() {
        let map = BTreeMap::new();
        let types = ["regular"];
        assert!(matches!(
            resolve_node_type("c1", &map, &types, Some("x"), None, 4, at("2026-03-01T00:00:00Z")),
            Err(NodeTypeError::UnknownQueue { .. })
        ));
    }

    #[test]
    fn a_queue_is_read_through_the_mapping_in_force_when_the_job_started() {
        // `batch` ran on regular nodes until 2026-06-01, on hugememory
        // from then until 2026-09-01, and left the map then.
        let moved = at("2026-06-01T00:00:00Z");
        let removed = at("2026-09-01T00:00:00Z");
        let mut rows = always("regular");
        rows[0].valid_until = Some(moved);
        rows.push(Dated {
            valid_from: moved,
            valid_until: Some(removed),
            value: "hugememory".to_owned(),
        });
        let map: QueueMap = [("batch".to_owned(), rows)].into_iter().collect();
        let types = ["regular", "hugememory", "gpu"];
        let resolve = |t: &str, gpus| resolve_node_type("c1", &map, &types, Some("batch"), None, gpus, at(t));
        assert_eq!(resolve("2026-05-31T23:59:59Z", 0), Ok("regular"));
        assert_eq!(resolve("2026-06-01T00:00:00Z", 0), Ok("hugememory"));
        assert_eq!(resolve("2026-08-31T23:59:59Z", 0), Ok("hugememory"));
        assert_eq!(
            resolve("2026-09-01T00:00:00Z", 0),
            Err(NodeTypeError::QueueEnded {
                cluster: "c1".into(),
                queue: "batch".into(),
                ended: removed,
                at: removed,
            })
        );
        assert_eq!(
            resolve("2026-10-01T00:00:00Z", 2),
            Ok("gpu"),
            "a GPU job of a queue out of the map is a gpu job, as an unmapped one"
        );
        assert_eq!(
            queue_node_type(&map, "batch", at("2026-01-01T00:00:00Z")),
            Some("regular")
        );
        assert_eq!(queue_node_type(&map, "batch", removed), None);
    }
}
