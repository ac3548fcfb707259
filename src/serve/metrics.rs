//! Counters for `/metrics`, in Prometheus' text format: jobs by outcome,
//! requests by status, request latency, and how many jobs each transaction
//! carried (what group commit does under load).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::conn::Over;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Debug, Default)]
pub struct Metrics {
    outcomes: Mutex<BTreeMap<&'static str, u64>>,
    statuses: Mutex<BTreeMap<u16, u64>>,
    /// Cumulative counts per bucket, plus +Inf.
    latency: [AtomicU64; BUCKETS.len() + 1],
    latency_micros: AtomicU64,
    batches: AtomicU64,
    batched: AtomicU64,
    /// `POST /check` requests answered, and the time spent answering them.
    checks: AtomicU64,
    check_micros: AtomicU64,
    /// `job_intake` after this process's last recording round: documents
    /// waiting, set aside, and when the oldest was received (Unix seconds;
    /// 0: none).
    intake_waiting: AtomicU64,
    intake_failed: AtomicU64,
    intake_oldest: AtomicU64,
    /// Connections served in full now.
    connections_open: AtomicU64,
    /// Connections answered from the overflow, by why ([`Over`]), and
    /// closed unanswered (past the overflow too).
    refused_full: AtomicU64,
    refused_client_share: AtomicU64,
    refused_closed: AtomicU64,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    pub(super) fn outcome(&self, name: &'static str) {
        *self.outcomes.lock().expect("metrics lock").entry(name).or_default() += 1;
    }

    pub(super) fn request(&self, status: u16, took: Duration) {
        *self.statuses.lock().expect("metrics lock").entry(status).or_default() += 1;
        let secs = took.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.latency[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency[BUCKETS.len()].fetch_add(1, Ordering::Relaxed);
        self.latency_micros
            .fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(super) fn check(&self, took: Duration) {
        self.checks.fetch_add(1, Ordering::Relaxed);
        self.check_micros
            .fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(super) fn intake(&self, waiting: u64, failed: u64, oldest_unix: u64) {
        self.intake_waiting.store(waiting, Ordering::Relaxed);
        self.intake_failed.store(failed, Ordering::Relaxed);
        self.intake_oldest.store(oldest_unix, Ordering::Relaxed);
    }

    /// A connection accepted: `None` closed at once (past the overflow),
    /// `Some(None)` served in full, `Some(Some(why))` answered from the
    /// overflow.
    pub(super) fn connection(&self, c: Option<Option<Over>>) {
        let counter = match c {
            None => &self.refused_closed,
            Some(None) => &self.connections_open,
            Some(Some(Over::Full)) => &self.refused_full,
            Some(Some(Over::ClientShare)) => &self.refused_client_share,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection served in full closed.
    pub(super) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    pub(super) fn batch(&self, jobs: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batched.fetch_add(jobs as u64, Ordering::Relaxed);
    }

    /// Jobs (and malformed documents) by outcome.
    pub fn jobs(&self, outcome: &str) -> u64 {
        self.outcomes
            .lock()
            .expect("metrics lock")
            .get(outcome)
            .copied()
            .unwrap_or(0)
    }

    /// Transactions the batcher ran, and the requests they carried.
    pub fn batches(&self) -> (u64, u64) {
        (
            self.batches.load(Ordering::Relaxed),
            self.batched.load(Ordering::Relaxed),
        )
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        out.push_str("# HELP hpc_ledger_serve_jobs_total Documents received, by what became of them.\n");
        out.push_str("# TYPE hpc_ledger_serve_jobs_total counter\n");
        let outcomes = self.outcomes.lock().expect("metrics lock").clone();
        for name in [
            "accepted",
            "recorded",
            "replayed",
            "revised",
            "superseded",
            "rejected",
            "skipped",
            "malformed",
            "malformed_not_kept",
            "set_aside",
        ] {
            let n = outcomes.get(name).copied().unwrap_or(0);
            let _ = writeln!(out, "hpc_ledger_serve_jobs_total{{outcome=\"{name}\"}} {n}");
        }
        out.push_str("# HELP hpc_ledger_serve_requests_total HTTP requests to the job endpoints, by status.\n");
        out.push_str("# TYPE hpc_ledger_serve_requests_total counter\n");
        for (status, n) in self.statuses.lock().expect("metrics lock").iter() {
            let _ = writeln!(out, "hpc_ledger_serve_requests_total{{status=\"{status}\"}} {n}");
        }
        out.push_str("# HELP hpc_ledger_serve_request_seconds Time from request to reply (after commit).\n");
        out.push_str("# TYPE hpc_ledger_serve_request_seconds histogram\n");
        for (i, bound) in BUCKETS.iter().enumerate() {
            let n = self.latency[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "hpc_ledger_serve_request_seconds_bucket{{le=\"{bound}\"}} {n}");
        }
        let count = self.latency[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "hpc_ledger_serve_request_seconds_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.latency_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "hpc_ledger_serve_request_seconds_sum {sum}");
        let _ = writeln!(out, "hpc_ledger_serve_request_seconds_count {count}");
        let (batches, batched) = self.batches();
        out.push_str("# HELP hpc_ledger_serve_transactions_total Transactions that recorded posted jobs.\n");
        out.push_str("# TYPE hpc_ledger_serve_transactions_total counter\n");
        let _ = writeln!(out, "hpc_ledger_serve_transactions_total {batches}");
        out.push_str("# HELP hpc_ledger_serve_transaction_jobs_total Jobs carried by those transactions.\n");
        out.push_str("# TYPE hpc_ledger_serve_transaction_jobs_total counter\n");
        let _ = writeln!(out, "hpc_ledger_serve_transaction_jobs_total {batched}");
        out.push_str("# HELP hpc_ledger_serve_checks_total Start checks answered (POST /check).\n");
        out.push_str("# TYPE hpc_ledger_serve_checks_total counter\n");
        let _ = writeln!(
            out,
            "hpc_ledger_serve_checks_total {}",
            self.checks.load(Ordering::Relaxed)
        );
        out.push_str("# HELP hpc_ledger_serve_check_seconds_total Time spent answering them.\n");
        out.push_str("# TYPE hpc_ledger_serve_check_seconds_total counter\n");
        let _ = writeln!(
            out,
            "hpc_ledger_serve_check_seconds_total {}",
            self.check_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        // `job_intake` after this process's last recording round (0 in a
        // process that does not record it).
        for (name, help, value) in [
            (
                "hpc_ledger_intake_waiting",
                "Jobs stored by serve --intake and not yet recorded, after the last recording round of the process that records them.",
                &self.intake_waiting,
            ),
            (
                "hpc_ledger_intake_failed",
                "Jobs set aside in job_intake (not counted in waiting): the database refused to record them or keep them as rejected.",
                &self.intake_failed,
            ),
            (
                "hpc_ledger_intake_oldest_timestamp_seconds",
                "When the oldest of either was received (0: none).",
                &self.intake_oldest,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        out.push_str("# HELP hpc_ledger_serve_connections Connections served in full now.\n");
        out.push_str("# TYPE hpc_ledger_serve_connections gauge\n");
        let _ = writeln!(
            out,
            "hpc_ledger_serve_connections {}",
            self.connections_open.load(Ordering::Relaxed)
        );
        out.push_str(
            "# HELP hpc_ledger_serve_connections_refused_total Connections not served in full: answered 503 because \
             every connection was held (full) or their address held its share (client_share), or closed unanswered \
             (closed).\n",
        );
        out.push_str("# TYPE hpc_ledger_serve_connections_refused_total counter\n");
        for (why, n) in [
            ("full", &self.refused_full),
            ("client_share", &self.refused_client_share),
            ("closed", &self.refused_closed),
        ] {
            let _ = writeln!(
                out,
                "hpc_ledger_serve_connections_refused_total{{why=\"{why}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_counts_what_happened() {
        let m = Metrics::new();
        m.outcome("recorded");
        m.outcome("recorded");
        m.outcome("rejected");
        m.request(201, Duration::from_millis(7));
        m.request(200, Duration::from_millis(300));
        m.batch(2);
        m.intake(3, 1, 1_700_000_000);
        let text = m.render();
        assert!(
            text.contains("hpc_ledger_serve_jobs_total{outcome=\"recorded\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("hpc_ledger_serve_jobs_total{outcome=\"rejected\"} 1\n"));
        assert!(text.contains("hpc_ledger_serve_jobs_total{outcome=\"replayed\"} 0\n"));
        assert!(text.contains("hpc_ledger_serve_requests_total{status=\"201\"} 1\n"));
        // 7 ms falls in le=0.01 and above, 300 ms in le=0.5 and above.
        assert!(text.contains("hpc_ledger_serve_request_seconds_bucket{le=\"0.005\"} 0\n"));
        assert!(text.contains("hpc_ledger_serve_request_seconds_bucket{le=\"0.01\"} 1\n"));
        assert!(text.contains("hpc_ledger_serve_request_seconds_bucket{le=\"0.5\"} 2\n"));
        assert!(text.contains("hpc_ledger_serve_request_seconds_count 2\n"));
        assert!(text.contains("hpc_ledger_serve_request_seconds_sum 0.307\n"), "{text}");
        assert!(text.contains("hpc_ledger_serve_transaction_jobs_total 2\n"));
        assert!(text.contains("hpc_ledger_intake_waiting 3\n"), "{text}");
        assert!(text.contains("hpc_ledger_intake_failed 1\n"), "{text}");
        assert!(text.contains("hpc_ledger_intake_oldest_timestamp_seconds 1700000000\n"));
        assert_eq!(m.jobs("recorded"), 2);
    }
}
