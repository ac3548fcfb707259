//! `alloc`, `balance`, `hold` and `check`: what projects may spend, what is
//! left, and whether a job may start (docs/budgets.md).

use std::process::ExitCode;

use chrono::TimeDelta;
use rust_decimal::Decimal;

use super::quote::RequestArgs;
use super::{Format, ListFormat, local_time, print_json, table};
use crate::db::Target;
use crate::domain::rules::Dated;
use crate::ids::AllocationId;
use crate::service::budget::{self, CheckAnswer, JobRequest, ProjectBalance};
use crate::service::config::time_zone;

/// `check` refused the job (or could not ask, with --on-unreachable deny).
pub const EXIT_REFUSED: u8 = 7;

#[derive(Debug, clap::Subcommand)]
pub enum AllocCmd {
    /// Grant money a project may spend from --from until --until (an award, a purchase, a credit),
    /// on every cluster or, with --cluster, on one.
    ///
    /// Examples:
    ///   hpc-ledger alloc grant PAS1234 5000.00 --from 2026-07-01 --until 2027-07-01 --reason "award 2026-123"
    ///   hpc-ledger alloc grant PAS1234 800.00 --from 2026-07-01 --cluster pitzer --reason "GPU award"
    #[command(verbatim_doc_comment)]
    Grant {
        /// The project's code.
        project: String,
        /// The amount, in the center's currency. (A negative one is read,
        /// to be refused by name rather than as an unknown option.)
        #[arg(allow_negative_numbers = true)]
        amount: Decimal,
        /// First instant it may be spent (a date is local midnight).
        #[arg(long)]
        from: String,
        /// First instant it no longer may (default: open-ended).
        #[arg(long)]
        until: Option<String>,
        /// Pay only for jobs on this cluster (a pool of its own; default: every cluster, storage, adjustments).
        #[arg(long)]
        cluster: Option<String>,
        /// Why: kept with the entry.
        #[arg(long)]
        reason: String,
    },
    /// Take part of a grant back (a new entry; the grant is never changed).
    ///
    /// Example:
    ///   hpc-ledger alloc reduce PAS1234 500.00 --grant 1 --reason "award cut"
    #[command(verbatim_doc_comment)]
    Reduce {
        /// The project's code.
        project: String,
        /// How much to take back.
        #[arg(allow_negative_numbers = true)]
        amount: Decimal,
        /// The grant it comes from (an id from `alloc list`).
        #[arg(long)]
        grant: i64,
        /// Why: kept with the entry.
        #[arg(long)]
        reason: String,
    },
    /// Move part of a grant to another project, from --from (default: now) until the grant ends.
    ///
    /// Example:
    ///   hpc-ledger alloc transfer PAS1234 PZS0708 250.00 --grant 1 --reason "shared student"
    #[command(verbatim_doc_comment)]
    Transfer {
        /// The project giving.
        from_project: String,
        /// The project receiving.
        to_project: String,
        /// How much.
        #[arg(allow_negative_numbers = true)]
        amount: Decimal,
        /// The grant of the giving project it comes from.
        #[arg(long)]
        grant: i64,
        /// First instant the receiving project may spend it.
        #[arg(long)]
        from: Option<String>,
        /// Why: kept with both entries.
        #[arg(long)]
        reason: String,
    },
    /// List allocation entries, with what is left of each grant.
    ///
    /// Example:
    ///   hpc-ledger alloc list --project PAS1234
    #[command(verbatim_doc_comment)]
    List {
        /// Only this project's.
        #[arg(long)]
        project: Option<String>,
        /// How to print it: text for people, csv or json for programs.
        #[arg(long, value_enum, default_value_t)]
        format: ListFormat,
    },
}

pub async fn run_alloc(cmd: AllocCmd, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let tz = time_zone(&pool).await?;
    let parse = |s: &str| crate::config::parse_instant(s, tz).map_err(anyhow::Error::msg);
    match cmd {
        AllocCmd::Grant {
            project,
            amount,
            from,
            until,
            cluster,
            reason,
        } => {
            let window = Dated {
                valid_from: parse(&from)?,
                valid_until: until.as_deref().map(parse).transpose()?,
                value: (),
            };
            if window.valid_until.is_some_and(|u| u <= window.valid_from) {
                anyhow::bail!("--until must be after --from");
            }
            let id = budget::grant(&pool, &project, amount, window, cluster.as_deref(), &reason, author).await?;
            match &cluster {
                Some(c) => println!("granted {amount:.2} to {project} on {c} as allocation {id}"),
                None => println!("granted {amount:.2} to {project} as allocation {id}"),
            }
        }
        AllocCmd::Reduce {
            project,
            amount,
            grant,
            reason,
        } => {
            let id = budget::reduce(&pool, &project, AllocationId(grant), amount, &reason, author).await?;
            println!("took {amount:.2} back from grant {grant} of {project} as allocation {id}");
        }
        AllocCmd::Transfer {
            from_project,
            to_project,
            amount,
            grant,
            from,
            reason,
        } => {
            let start = from.as_deref().map(parse).transpose()?;
            let (out, inn) = budget::transfer(
                &pool,
                &from_project,
                AllocationId(grant),
                &to_project,
                amount,
                start,
                &reason,
                author,
            )
            .await?;
            println!(
                "transferred {amount:.2} of grant {grant} from {from_project} to {to_project} (allocations {out} and {inn})"
            );
        }
        AllocCmd::List { project, format } => {
            let rows = budget::allocations(&pool, project.as_deref()).await?;
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r.id.to_string(),
                        r.project.clone(),
                        r.kind.clone(),
                        r.cluster.clone().unwrap_or_else(|| "all".into()),
                        format!("{:.2}", r.amount),
                        local_time(r.valid_from, tz),
                        r.valid_until.map_or("-".into(), |u| local_time(u, tz)),
                        r.grant_id.or(r.transfer_of).map_or(String::new(), |g| g.to_string()),
                        r.left.map_or(String::new(), |l| format!("{l:.2}")),
                        r.author.clone(),
                        r.reason.clone(),
                    ]
                })
                .collect();
            let head = [
                "id", "project", "kind", "cluster", "amount", "from", "until", "of", "left", "by", "reason",
            ];
            match format {
                ListFormat::Json => print_json(&rows)?,
                ListFormat::Csv => print!("{}", table::csv(&head, &cells)),
                ListFormat::Text if rows.is_empty() => println!("no allocations"),
                ListFormat::Text => print!("{}", table::render(&head, &cells)),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, clap::Args)]
pub struct BalanceArgs {
    /// The project's code.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    project: Option<String>,
    /// Every project with an allocation.
    #[arg(long)]
    all: bool,
    /// The balance at this instant (default: now).
    #[arg(long)]
    at: Option<String>,
    /// How to print it: text for people, csv or json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: ListFormat,
}

pub async fn run_balance(args: BalanceArgs, target: &Target) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let tz = time_zone(&pool).await?;
    let at = super::instant(args.at.as_deref(), tz)?;
    if args.at.is_some() {
        budget::check_asked_at(&pool, at).await?;
    }
    let list = match &args.project {
        Some(p) => budget::pools(&pool, p, at).await?,
        None => budget::balances(&pool, at).await?,
    };
    match args.format {
        // A list, one object per pool, whatever the project has.
        ListFormat::Json => print_json(&list)?,
        ListFormat::Csv => {
            let (head, rows) = balance_table(&list, tz);
            print!("{}", table::csv(&head, &rows));
        }
        ListFormat::Text if args.project.is_some() => {
            // Whether a cluster without a pool of its own yet draws on a
            // budgeted general pool (its jobs are checked against that).
            let general = list.iter().any(|b| b.balance.cluster.is_none() && b.balance.budgeted);
            for b in &list {
                print!("{}", balance_text(b, tz, general));
            }
        }
        ListFormat::Text => {
            let (head, rows) = balance_table(&list, tz);
            print!("{}", table::render(&head, &rows));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn balance_table(list: &[ProjectBalance], tz: chrono_tz::Tz) -> ([&'static str; 10], Vec<Vec<String>>) {
    let rows = list
        .iter()
        .map(|b| {
            let x = &b.balance;
            vec![
                b.project.clone(),
                x.cluster.clone().unwrap_or_else(|| "all".into()),
                format!("{:.2}", x.allocated),
                format!("{:.2}", x.used),
                format!("{:.2}", x.held),
                format!("{:.2}", x.remaining),
                format!("{:.1}", x.fraction_used * Decimal::ONE_HUNDRED),
                format!("{:.2}", x.burn_per_day),
                x.runs_out.map_or(String::new(), |t| local_time(t, tz)),
                x.next_end.map_or(String::new(), |t| local_time(t, tz)),
            ]
        })
        .collect();
    (
        [
            "project",
            "cluster",
            "allocated",
            "used",
            "held",
            "remaining",
            "% used",
            "per day",
            "runs out",
            "grant ends",
        ],
        rows,
    )
}

fn balance_text(b: &ProjectBalance, tz: chrono_tz::Tz, general_budgeted: bool) -> String {
    let x = &b.balance;
    let name = match &x.cluster {
        Some(c) => format!("{} on {c}", b.project),
        None => b.project.clone(),
    };
    if !x.budgeted {
        // A cluster whose own grant has not begun draws on the general pool
        // (docs/budgets.md): its jobs are checked, against that pool. It
        // said "not checked" (a billing office's review of 2026-12-07).
        let why = match (&x.cluster, general_budgeted) {
            (Some(_), true) => "its jobs draw on the general pool until a grant of its own begins",
            _ => "not budgeted: its jobs are not checked",
        };
        return format!("{name}: no allocation in force at {} ({why})\n", local_time(x.at, tz));
    }
    let mut out = format!(
        "{name} at {} (allocations in force since {}):\n",
        local_time(x.at, tz),
        x.pool_from.map_or("-".into(), |t| local_time(t, tz))
    );
    for (what, v) in [
        ("allocated", x.allocated),
        ("used", x.used),
        ("held", x.held),
        ("remaining", x.remaining),
    ] {
        out.push_str(&format!("  {what:<10} {v:>14.2}\n"));
    }
    // A burn that rounds to 0.00 but runs the pool out some day is not
    // printed as 0.00 beside that day.
    let burn = if x.burn_per_day.is_zero() && x.drawn_recently > Decimal::ZERO {
        "under 0.01".to_owned()
    } else {
        format!("{:.2}", x.burn_per_day)
    };
    out.push_str(&format!(
        "  {:.1} % used; {burn} a day over the last {} days; {}\n",
        x.fraction_used * Decimal::ONE_HUNDRED,
        crate::domain::budget::BURN_DAYS,
        match (x.runs_out, x.remaining > Decimal::ZERO) {
            (_, false) => "spent".to_owned(),
            // Other grants end later: it may run out on them, sooner if what
            // the first leaves expires unspent.
            (Some(t), true) if x.next_end.is_some_and(|e| e < t) => format!(
                "runs out around {} at this rate, or sooner: a grant in force ends first, on {}, and what is left \
                 of it then expires",
                local_time(t, tz),
                x.next_end.map_or(String::new(), |e| local_time(e, tz))
            ),
            (Some(t), true) => format!("runs out around {}", local_time(t, tz)),
            // It would last past the grants' end: what is left then expires.
            (None, true) if x.drawn_recently > Decimal::ZERO && x.last_end.is_some() => format!(
                "does not run out before {}, when {} in force end{} (what is left then expires)",
                x.last_end.map_or(String::new(), |t| local_time(t, tz)),
                if x.next_end == x.last_end {
                    "a grant"
                } else {
                    "the grants"
                },
                if x.next_end == x.last_end { "s" } else { "" }
            ),
            (None, true) => "nothing drawn lately".to_owned(),
        }
    ));
    out
}

/// A job about to run, as a hook knows it.
#[derive(Debug, clap::Args)]
pub struct JobArgs {
    /// The project (account) the job is charged to.
    #[arg(long)]
    project: String,
    /// The scheduler's job id.
    #[arg(long)]
    job_id: Option<String>,
    /// The array task's index.
    #[arg(long)]
    array_index: Option<u32>,
    #[command(flatten)]
    request: RequestArgs,
}

impl JobArgs {
    fn job(self, at: chrono::DateTime<chrono::Utc>) -> JobRequest {
        JobRequest {
            project: self.project.clone(),
            job_id: self.job_id,
            array_index: self.array_index,
            quote: self.request.quote_request(at, Some(self.project), None),
            tasks: 1,
        }
    }
}

/// Why a check that reached the ledger and was refused by how it is set up
/// exits 1 whatever `--on-unreachable` says.
const MISCONFIGURED: &str = "the check is set up wrong (this is not an outage, so --on-unreachable does not apply)";

/// Why `--server` is not `HOST:PORT` (serve's address, as `serve
/// --listen` takes it), if it is not: a URL, a path, or no port.
fn not_host_port(addr: &str) -> Option<&'static str> {
    if addr.contains("://") || addr.contains('/') {
        return Some("give serve's HOST:PORT, not a URL (as in ledger.example.edu:8080)");
    }
    let port = addr.rsplit_once(':').map(|(host, port)| (host, port.parse::<u16>()));
    match port {
        Some((host, Ok(_))) if !host.is_empty() => None,
        _ => Some("give serve's HOST:PORT, with its port (as in ledger.example.edu:8080)"),
    }
}

/// What to do when the ledger cannot be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnUnreachable {
    /// Let the job start (fail open): a ledger outage never stops the machine.
    Allow,
    /// Refuse it (fail closed): no job starts unpaid.
    Deny,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Refuse a job that would leave less than this.
    #[arg(long, default_value = "0")]
    floor: Decimal,
    /// An array of this many tasks, each of this size, checked whole (at
    /// submission: every task may run its whole walltime). Not with
    /// --array-index.
    #[arg(long, default_value_t = 1, value_name = "N", conflicts_with = "array_index")]
    tasks: u32,
    /// Ask `hpc-ledger serve` at this address (host:port) instead of the database.
    #[arg(long, value_name = "HOST:PORT")]
    server: Option<String>,
    /// A file holding `user:password`, the basic credentials `serve` takes (HPC_LEDGER_SERVE_BASIC_FILE).
    #[arg(long, env = "HPC_LEDGER_CHECK_BASIC_FILE", value_name = "FILE", requires = "server")]
    basic_file: Option<std::path::PathBuf>,
    /// When the ledger (database or server) cannot be asked: allow (exit 0) or deny (exit 7).
    #[arg(long, value_enum, default_value = "allow")]
    on_unreachable: OnUnreachable,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

impl CheckArgs {
    /// Whether it asks `serve` (`--server`): then it needs no database.
    pub fn asks_server(&self) -> bool {
        self.server.is_some()
    }
}

/// `check`: against `target`'s database, or serve's with `--server` (then
/// `target` may be `None`).
pub async fn run_check(args: CheckArgs, target: Option<&Target>) -> anyhow::Result<ExitCode> {
    let unreachable = |why: String| -> anyhow::Result<ExitCode> {
        let allowed = args.on_unreachable == OnUnreachable::Allow;
        let reason = format!(
            "the ledger could not be asked ({why}); {}",
            if allowed {
                "allowed (--on-unreachable allow)"
            } else {
                "refused (--on-unreachable deny)"
            }
        );
        match args.format {
            Format::Json => {
                print_json(&serde_json::json!({ "allowed": allowed, "reason": reason, "unreachable": true }))?
            }
            Format::Text => eprintln!("{reason}"),
        }
        Ok(if allowed {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_REFUSED)
        })
    };
    let answer: CheckAnswer = match &args.server {
        Some(addr) => {
            let mut body = serde_json::json!({
                "project": args.job.project, "job_id": args.job.job_id, "array_index": args.job.array_index,
                "cluster": args.job.request.cluster(), "resources": args.job.request.resources(),
                "walltime": args.job.request.walltime(), "queue": args.job.request.queue(),
                "node_type": args.job.request.node_type(), "floor": args.floor.to_string(),
            });
            // Only for an array: a serve before `tasks` refuses a field it
            // does not know.
            if args.tasks > 1 {
                body["tasks"] = args.tasks.into();
            }
            // How the check is set up first: an address that is not
            // HOST:PORT (a URL, a path, no port) or a credential file that
            // cannot be read is no outage, whatever --on-unreachable says.
            if let Some(why) = not_host_port(addr) {
                anyhow::bail!("--server {addr}: {why}; {MISCONFIGURED}");
            }
            let auth = match &args.basic_file {
                Some(f) => Some(crate::serve::client::basic(
                    std::fs::read_to_string(f)
                        .map_err(|e| anyhow::anyhow!("reading {}: {e}", f.display()))?
                        .trim(),
                )),
                None => None,
            };
            // A name that does not resolve may be a DNS outage: unreachable.
            let addr = match tokio::net::lookup_host(addr.as_str())
                .await
                .ok()
                .and_then(|mut a| a.next())
            {
                Some(a) => a,
                None => return unreachable(format!("cannot resolve {addr}")),
            };
            let reply = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                crate::serve::client::post(addr, "/check", auth.as_deref(), body.to_string().as_bytes()),
            )
            .await;
            match reply {
                Ok(Ok(r)) if r.status == 200 => serde_json::from_str(&r.body)?,
                Ok(Ok(r)) if r.status == 400 || r.status == 422 => anyhow::bail!("{}", r.body.trim()),
                // The credentials (--basic-file) were refused, by serve (401)
                // or a proxy before it (403). Not an outage: a wrong
                // credential must not let every job start unchecked. A 404
                // stays one: a proxy answers it while serve restarts.
                Ok(Ok(r)) if matches!(r.status, 401 | 403) => anyhow::bail!(
                    "{addr} answered {} ({}): the credentials (--basic-file) are refused; {MISCONFIGURED}",
                    r.status,
                    r.body.trim().chars().take(200).collect::<String>(),
                ),
                Ok(Ok(r)) => return unreachable(format!("{addr} answered {}: {}", r.status, r.body.trim())),
                Ok(Err(e)) => return unreachable(e.to_string()),
                Err(_) => return unreachable(format!("{addr} did not answer within 5 s")),
            }
        }
        None => {
            // The database, asked within 5 s like the server; when it cannot
            // be, --on-unreachable decides.
            let asked = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                let Some(target) = target else {
                    return Err(crate::db::DbError::BadUrl("no ledger database to ask".into()));
                };
                let pool = target.open_configured().await?;
                let job = budget::JobRequest {
                    tasks: args.tasks,
                    ..args.job.job(chrono::Utc::now())
                };
                Ok::<_, crate::db::DbError>(budget::check(&pool, &job, args.floor).await)
            })
            .await;
            match asked {
                Err(_) => return unreachable("the database did not answer within 5 s".into()),
                Ok(Err(e) | Ok(Err(budget::BudgetError::Db(e)))) if e.is_configuration() => {
                    anyhow::bail!("{e}; {MISCONFIGURED}")
                }
                Ok(Err(e) | Ok(Err(budget::BudgetError::Db(e)))) => return unreachable(e.to_string()),
                Ok(Ok(answer)) => answer?,
            }
        }
    };
    match args.format {
        Format::Json => print_json(&answer)?,
        Format::Text => println!(
            "{}: {} ({})",
            answer.project,
            if answer.verdict.allowed {
                "may start"
            } else {
                "may not start"
            },
            answer.verdict.reason
        ),
    }
    Ok(if answer.verdict.allowed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_REFUSED)
    })
}

#[derive(Debug, clap::Args)]
pub struct HoldArgs {
    #[command(flatten)]
    job: JobArgs,
    /// How long after its walltime an unsettled hold expires.
    #[arg(long, default_value = "1h", value_parser = parse_grace)]
    grace: TimeDelta,
    /// How to print it: text for people, json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

fn parse_grace(s: &str) -> Result<TimeDelta, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 30m, 1h or 2d"))?;
    match unit {
        "s" => Ok(TimeDelta::seconds(n)),
        "m" | "min" => Ok(TimeDelta::minutes(n)),
        "h" | "" => Ok(TimeDelta::hours(n)),
        "d" => Ok(TimeDelta::days(n)),
        _ => Err(format!("{s:?} is not a duration like 30m, 1h or 2d")),
    }
}

pub async fn run_hold(args: HoldArgs, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let tz = time_zone(&pool).await?;
    let job = args.job.job(super::instant(None, tz)?);
    let h = budget::hold(&pool, &job, args.grace, author).await?;
    match args.format {
        Format::Json => print_json(&h)?,
        Format::Text => println!(
            "{} {:.2} on {} for job {} until {} ({})",
            if h.placed_now { "held" } else { "already held" },
            h.amount,
            h.check.project,
            job.job_id.as_deref().unwrap_or("?"),
            local_time(h.expires_at, tz),
            h.check.verdict.reason
        ),
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, clap::Subcommand)]
pub enum SlurmCmd {
    /// Block the Slurm accounts of projects with nothing left (their jobs stay pending), unblock the others.
    ///
    /// Examples:
    ///   hpc-ledger slurm sync --cluster owens --dry-run
    ///   hpc-ledger slurm sync --cluster owens        # from cron, every minute
    #[command(verbatim_doc_comment)]
    Sync {
        /// The ledger's cluster.
        #[arg(long)]
        cluster: String,
        /// The cluster's name in Slurm (ClusterName), when it differs (default: the ledger's, in lower case).
        #[arg(long)]
        slurm_cluster: Option<String>,
        /// Block an account whose remaining balance is at or below this.
        #[arg(long, default_value = "0")]
        floor: Decimal,
        /// Print what would change; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// The sacctmgr to run.
        #[arg(long, env = "HPC_LEDGER_SACCTMGR", default_value = "sacctmgr")]
        sacctmgr: std::path::PathBuf,
        /// How to print it: text for people, json for programs.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
}

pub async fn run_slurm(cmd: SlurmCmd, target: &Target, author: &str) -> anyhow::Result<ExitCode> {
    let SlurmCmd::Sync {
        cluster,
        slurm_cluster,
        floor,
        dry_run,
        sacctmgr,
        format,
    } = cmd;
    let pool = target.open_configured().await?;
    let options = crate::service::enforce::SyncOptions {
        cluster,
        slurm_cluster,
        floor,
        dry_run,
        sacctmgr,
    };
    let r = crate::service::enforce::slurm_sync(&pool, &options, author).await?;
    let failed = r.actions.iter().any(|a| a.succeeded == Some(false));
    match format {
        Format::Json => print_json(&r)?,
        Format::Text => {
            for a in &r.actions {
                let verb = match a.action {
                    crate::domain::budget::Enforce::Block => "block",
                    crate::domain::budget::Enforce::Unblock => "unblock",
                };
                let how = match a.succeeded {
                    None => "would run".to_owned(),
                    Some(true) => "ran".to_owned(),
                    Some(false) => format!("FAILED: {}", a.output),
                };
                println!(
                    "{verb} {} (account {}, {:.2} remaining): {how} {}",
                    a.project, a.account, a.remaining, a.command
                );
            }
            for p in &r.no_account {
                println!("note: project {p} is budgeted but has no Slurm account on this cluster");
            }
            for p in &r.blocked_by_hand {
                println!(
                    "note: project {p} has money but its account was blocked in Slurm by hand, not by the ledger: left alone"
                );
            }
            println!(
                "{}: {} budgeted project(s), {} blocked; {}",
                r.cluster,
                r.projects,
                r.blocked,
                match (r.actions.len(), r.dry_run) {
                    (0, _) => "nothing to change".to_owned(),
                    (n, true) => format!("{n} change(s) would be made (dry run)"),
                    (n, false) => format!("{n} change(s) made"),
                }
            );
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

#[derive(Debug, clap::Args)]
pub struct AlertsArgs {
    /// Record the thresholds crossed now (from cron), before listing.
    #[arg(long)]
    check: bool,
    /// Deliver every crossing not yet delivered here: a JSON POST to this http:// URL.
    #[arg(long, requires = "check", conflicts_with = "command")]
    webhook: Option<String>,
    /// Deliver them by running this shell command with the JSON on stdin
    /// (e.g. `curl -fsS -d @- https://…` or `mail -s "budget alert" billing@…`).
    #[arg(long, requires = "check")]
    command: Option<String>,
    /// How to print it: text for people, csv or json for programs.
    #[arg(long, value_enum, default_value_t)]
    format: ListFormat,
}

pub async fn run_alerts(args: AlertsArgs, target: &Target) -> anyhow::Result<ExitCode> {
    let pool = target.open_configured().await?;
    let tz = time_zone(&pool).await?;
    let mut failed = false;
    if args.check {
        let channel = match (args.webhook, args.command) {
            (Some(u), _) => Some(budget::Channel::Webhook(u)),
            (None, Some(c)) => Some(budget::Channel::Command(c)),
            (None, None) => None,
        };
        let run = budget::check_alerts(&pool, channel.as_ref()).await?;
        if run.thresholds.is_empty() {
            eprintln!("note: no alert thresholds are configured ([budgets] alert_thresholds in the configuration)");
        }
        for c in &run.new {
            eprintln!(
                "new: {}{} crossed {} % ({:.2} of {:.2} used)",
                c.project,
                c.cluster.as_deref().map(|k| format!(" on {k}")).unwrap_or_default(),
                c.threshold,
                c.used,
                c.allocated
            );
        }
        for (id, channel, ok) in &run.delivered {
            eprintln!(
                "alert {id} to {channel}: {}",
                if *ok {
                    "delivered"
                } else {
                    "NOT delivered (kept for the next run)"
                }
            );
            failed |= !ok;
        }
    }
    let list = budget::alerts(&pool).await?;
    let head = [
        "alert",
        "project",
        "pool",
        "threshold %",
        "allocated",
        "used",
        "remaining",
        "crossed",
        "delivered to",
    ];
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            vec![
                c.id.to_string(),
                c.project.clone(),
                // A pool of one cluster's allocations, or the general one.
                c.cluster.clone().unwrap_or_else(|| "all".into()),
                c.threshold.to_string(),
                format!("{:.2}", c.allocated),
                format!("{:.2}", c.used),
                format!("{:.2}", c.remaining),
                local_time(c.crossed_at, tz),
                c.delivered.join("; "),
            ]
        })
        .collect();
    match args.format {
        ListFormat::Json => print_json(&list)?,
        ListFormat::Csv => print!("{}", table::csv(&head, &rows)),
        ListFormat::Text if list.is_empty() => println!("no budget alerts"),
        ListFormat::Text => print!("{}", table::render(&head, &rows)),
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
