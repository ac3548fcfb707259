//! Whether the database's own guards are the ones the migrations installed
//! (issue 13, item 6): the owner of the schema can replace a function
//! (`hl_refuse_change()`, a seal function), a view the audit reads, or
//! disable a trigger, then make the database agree with itself. `audit`
//! checks them against definitions compiled into this binary from the
//! migrations (`build.rs`): every `hl_*` function's body as written, how
//! it runs (`SECURITY DEFINER` or not, its `SET` clauses such as
//! `search_path`) and that it belongs to the ledger's owner, every
//! aggregate's transition function, every `audit` view's query, and every
//! guard trigger, on its table, calling its function (in `public`), enabled
//! as installed (`ENABLE ALWAYS`, which also fires under
//! `session_replication_role = replica`).

use sqlx::PgConnection;

include!(concat!(env!("OUT_DIR"), "/definitions.rs"));

/// An aggregate as the migrations define it (`build.rs`: names as written,
/// lowercase), or as the database has it (functions named with their
/// schema); `""` for no initial state or final function.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Aggregate<S = &'static str> {
    pub name: S,
    pub transition: S,
    pub state: S,
    pub initial: S,
    pub last: S,
}

/// Every trigger the migrations leave: table, trigger, function, and how it
/// is enabled (`A` always, `O` on origin). A test checks this list against
/// a freshly migrated database, so a new trigger cannot be forgotten here.
pub const TRIGGERS: &[(&str, &str, &str, char)] = &[
    (
        "access_revocation",
        "access_revocation_append_only",
        "hl_refuse_change",
        'A',
    ),
    (
        "access_revocation",
        "access_revocation_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    ("access_revocation", "access_revocation_stamp", "hl_access_stamp", 'A'),
    ("access_token", "access_token_append_only", "hl_refuse_change", 'A'),
    ("access_token", "access_token_no_truncate", "hl_refuse_change", 'A'),
    ("access_token", "access_token_stamp", "hl_access_stamp", 'A'),
    ("allocation", "allocation_append_only", "hl_refuse_change", 'A'),
    ("allocation", "allocation_check", "hl_allocation_check", 'A'),
    ("allocation", "allocation_no_truncate", "hl_refuse_change", 'A'),
    ("alert_crossing", "alert_crossing_append_only", "hl_refuse_change", 'A'),
    ("alert_crossing", "alert_crossing_no_truncate", "hl_refuse_change", 'A'),
    ("alert_delivery", "alert_delivery_append_only", "hl_refuse_change", 'A'),
    ("alert_delivery", "alert_delivery_no_truncate", "hl_refuse_change", 'A'),
    (
        "alert_threshold",
        "alert_threshold_rules_version",
        "hl_bump_rules_version",
        'O',
    ),
    (
        "archived_charge",
        "archived_charge_append_only",
        "hl_refuse_change",
        'A',
    ),
    (
        "archived_charge",
        "archived_charge_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    ("archived_draw", "archived_draw_append_only", "hl_refuse_change", 'A'),
    ("archived_draw", "archived_draw_no_truncate", "hl_refuse_change", 'A'),
    (
        "archived_period",
        "archived_period_append_only",
        "hl_refuse_change",
        'A',
    ),
    (
        "archived_period",
        "archived_period_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    (
        "archived_record",
        "archived_record_append_only",
        "hl_refuse_change",
        'A',
    ),
    (
        "archived_record",
        "archived_record_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    (
        "archived_record_file",
        "archived_record_file_append_only",
        "hl_refuse_change",
        'A',
    ),
    (
        "archived_record_file",
        "archived_record_file_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    ("archived_rule", "archived_rule_append_only", "hl_refuse_change", 'A'),
    ("archived_rule", "archived_rule_no_truncate", "hl_refuse_change", 'A'),
    ("billing_run", "billing_run_append_only", "hl_refuse_change", 'A'),
    ("billing_run", "billing_run_no_truncate", "hl_refuse_change", 'A'),
    ("billing_run", "billing_run_not_waived", "hl_storage_waiver_check", 'A'),
    ("charging_rules", "charging_rules_append_only", "hl_refuse_change", 'A'),
    ("charging_rules", "charging_rules_no_truncate", "hl_refuse_change", 'A'),
    ("center", "center_guard", "hl_center_guard", 'A'),
    ("center", "center_no_truncate", "hl_center_guard", 'A'),
    ("center", "center_rules_version", "hl_bump_rules_version", 'O'),
    ("closed_period", "closed_period_append_only", "hl_refuse_change", 'A'),
    (
        "closed_period",
        "closed_period_in_order",
        "hl_closed_period_in_order",
        'A',
    ),
    ("closed_period", "closed_period_no_truncate", "hl_refuse_change", 'A'),
    ("closed_period", "closed_period_seal", "hl_close_month", 'A'),
    ("cluster", "cluster_guard", "hl_cluster_guard", 'A'),
    ("cluster", "cluster_keep_referenced", "hl_cluster_keep_referenced", 'A'),
    ("cluster", "cluster_rules_version", "hl_bump_rules_version", 'O'),
    (
        "cluster",
        "cluster_truncate_when_recorded",
        "hl_refuse_truncate_when_recorded",
        'A',
    ),
    (
        "correction_request",
        "correction_request_append_only",
        "hl_refuse_change",
        'A',
    ),
    (
        "correction_request",
        "correction_request_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    ("discount", "discount_guard", "hl_discount_guard", 'A'),
    ("discount", "discount_no_truncate", "hl_refuse_change", 'A'),
    ("discount", "discount_rules_version", "hl_bump_rules_version", 'O'),
    (
        "enforcement_action",
        "enforcement_action_append_only",
        "hl_refuse_change",
        'A',
    ),
    (
        "enforcement_action",
        "enforcement_action_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    ("funding_source", "funding_source_append_only", "hl_refuse_change", 'A'),
    ("funding_source", "funding_source_check", "hl_journal_set_check", 'A'),
    ("funding_source", "funding_source_no_truncate", "hl_refuse_change", 'A'),
    ("funding_source", "funding_source_whole", "hl_journal_set_whole", 'A'),
    ("hold", "hold_append_only", "hl_refuse_change", 'A'),
    ("hold", "hold_check", "hl_hold_check", 'A'),
    ("hold", "hold_no_truncate", "hl_refuse_change", 'A'),
    ("job", "job_append_only", "hl_refuse_change", 'A'),
    ("job", "job_no_truncate", "hl_refuse_change", 'A'),
    ("job", "job_references", "hl_job_references", 'A'),
    (
        "job_record",
        "job_record_append_only",
        "hl_job_record_refuse_change",
        'A',
    ),
    ("job_record", "job_record_no_truncate", "hl_refuse_change", 'A'),
    ("job_record", "job_record_references", "hl_job_record_references", 'A'),
    ("journal_export", "journal_export_append_only", "hl_refuse_change", 'A'),
    (
        "journal_export",
        "journal_export_as_exported",
        "hl_journal_export_as_exported",
        'A',
    ),
    ("journal_export", "journal_export_no_truncate", "hl_refuse_change", 'A'),
    (
        "ledger_entry",
        "ledger_entry_append_only",
        "hl_ledger_refuse_change",
        'A',
    ),
    ("ledger_entry", "ledger_entry_guard", "hl_ledger_entry_guard", 'A'),
    ("ledger_entry", "ledger_entry_no_truncate", "hl_refuse_change", 'A'),
    (
        "ledger_entry",
        "ledger_entry_references",
        "hl_ledger_entry_references",
        'A',
    ),
    ("ledger_entry", "ledger_entry_rollups", "hl_ledger_rollups_add", 'A'),
    ("ledger_entry", "ledger_entry_seal_digest", "hl_entry_seal_digest", 'A'),
    (
        "node_type",
        "node_type_keep_referenced",
        "hl_node_type_keep_referenced",
        'A',
    ),
    ("node_type", "node_type_rules_version", "hl_bump_rules_version", 'O'),
    (
        "node_type",
        "node_type_truncate_when_recorded",
        "hl_refuse_truncate_when_recorded",
        'A',
    ),
    ("project", "project_keep_referenced", "hl_project_keep_referenced", 'A'),
    (
        "project",
        "project_truncate_when_recorded",
        "hl_refuse_truncate_when_recorded",
        'A',
    ),
    ("queue_map", "queue_map_guard", "hl_queue_map_guard", 'A'),
    ("queue_map", "queue_map_rules_version", "hl_bump_rules_version", 'O'),
    (
        "queue_map",
        "queue_map_truncate_when_recorded",
        "hl_refuse_truncate_when_recorded",
        'A',
    ),
    ("project_class", "project_class_append_only", "hl_refuse_change", 'A'),
    ("project_class", "project_class_check", "hl_project_class_check", 'A'),
    ("project_class", "project_class_no_truncate", "hl_refuse_change", 'A'),
    (
        "project_class",
        "project_class_rules_version",
        "hl_bump_rules_version",
        'O',
    ),
    (
        "project_reassignment",
        "project_reassignment_append_only",
        "hl_refuse_change",
        'A',
    ),
    (
        "project_reassignment",
        "project_reassignment_check",
        "hl_project_reassignment_check",
        'A',
    ),
    (
        "project_reassignment",
        "project_reassignment_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    ("rate_class", "rate_class_guard", "hl_rate_class_guard", 'A'),
    ("rate_class", "rate_class_no_truncate", "hl_refuse_change", 'A'),
    ("rate_class", "rate_class_rules_version", "hl_bump_rules_version", 'O'),
    ("rate_card", "rate_card_guard", "hl_rate_card_guard", 'A'),
    ("rate_card", "rate_card_keep_referenced", "hl_rate_keep_referenced", 'A'),
    ("rate_card", "rate_card_rules_version", "hl_bump_rules_version", 'O'),
    (
        "rate_card",
        "rate_card_truncate_when_recorded",
        "hl_refuse_truncate_when_recorded",
        'A',
    ),
    (
        "record_read_options",
        "record_read_options_append_only",
        "hl_refuse_change",
        'A',
    ),
    (
        "record_read_options",
        "record_read_options_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    (
        "rejected_record",
        "rejected_record_evidence",
        "hl_rejected_record_evidence",
        'A',
    ),
    (
        "rejected_record",
        "rejected_record_guard",
        "hl_rejected_record_guard",
        'A',
    ),
    (
        "rejected_record",
        "rejected_record_no_truncate",
        "hl_rejected_record_no_truncate",
        'A',
    ),
    (
        "revenue_account",
        "revenue_account_append_only",
        "hl_refuse_change",
        'A',
    ),
    ("revenue_account", "revenue_account_check", "hl_journal_set_check", 'A'),
    (
        "revenue_account",
        "revenue_account_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    ("revenue_account", "revenue_account_whole", "hl_journal_set_whole", 'A'),
    ("statement", "statement_append_only", "hl_refuse_change", 'A'),
    ("statement", "statement_header", "hl_statement_header", 'A'),
    ("statement", "statement_no_truncate", "hl_refuse_change", 'A'),
    (
        "storage_charge_segment",
        "storage_charge_segment_append_only",
        "hl_ledger_refuse_change",
        'A',
    ),
    (
        "storage_charge_segment",
        "storage_charge_segment_no_truncate",
        "hl_refuse_change",
        'A',
    ),
    (
        "storage_charge_segment",
        "storage_charge_segment_references",
        "hl_storage_charge_segment_references",
        'A',
    ),
    (
        "storage_quota",
        "storage_quota_after_billed_months",
        "hl_quota_after_billed_months",
        'A',
    ),
    ("storage_quota", "storage_quota_append_only", "hl_refuse_change", 'A'),
    ("storage_quota", "storage_quota_no_truncate", "hl_refuse_change", 'A'),
    ("storage_rate", "storage_rate_guard", "hl_storage_rate_guard", 'A'),
    (
        "storage_rate",
        "storage_rate_keep_referenced",
        "hl_rate_keep_referenced",
        'A',
    ),
    (
        "storage_rate",
        "storage_rate_rules_version",
        "hl_bump_rules_version",
        'O',
    ),
    (
        "storage_rate",
        "storage_rate_truncate_when_recorded",
        "hl_refuse_truncate_when_recorded",
        'A',
    ),
    ("storage_waiver", "storage_waiver_append_only", "hl_refuse_change", 'A'),
    ("storage_waiver", "storage_waiver_check", "hl_storage_waiver_check", 'A'),
    ("storage_waiver", "storage_waiver_no_truncate", "hl_refuse_change", 'A'),
    (
        "billing_run",
        "billing_run_read_committed",
        "hl_read_committed_only",
        'A',
    ),
    ("closed_period", "closed_period_checks", "hl_close_checks", 'A'),
    (
        "closed_period",
        "closed_period_read_committed",
        "hl_read_committed_only",
        'A',
    ),
    (
        "ledger_entry",
        "ledger_entry_read_committed",
        "hl_read_committed_only",
        'A',
    ),
    (
        "storage_charge_segment",
        "storage_charge_segment_open_month",
        "hl_segments_open_month",
        'A',
    ),
    (
        "storage_charge_segment",
        "storage_charge_segment_read_committed",
        "hl_read_committed_only",
        'A',
    ),
    (
        "storage_quota",
        "storage_quota_read_committed",
        "hl_read_committed_only",
        'A',
    ),
];

/// One `hl_*` function as the database has it.
#[derive(sqlx::FromRow)]
struct Installed {
    name: String,
    body: String,
    definer: bool,
    settings: Vec<String>,
    owner: String,
    ledger_owner: String,
}

/// A `proconfig` item (`search_path=public, pg_temp`) as `build.rs` writes
/// the migrations' `SET` clauses: the name lowercase, the value without
/// whitespace, its case and identifier quotes kept.
fn normalized_setting(item: &str) -> String {
    let (name, value) = item.split_once('=').unwrap_or((item, ""));
    format!(
        "{}={}",
        name.trim().to_ascii_lowercase(),
        value.chars().filter(|c| !c.is_whitespace()).collect::<String>()
    )
}

/// A definition that is not the one the migrations installed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Altered {
    /// `function`, `aggregate`, `view` or `trigger`.
    pub kind: &'static str,
    pub name: String,
    pub problem: String,
}

/// Every function, audit view and trigger that differs from its migration.
/// Runs in a transaction it rolls back (the views are compared by creating
/// each again as a temporary view and comparing PostgreSQL's own rendering
/// of both, which does not depend on the server's version). `views: false`
/// leaves the views out (a streaming replica can create none, not even a
/// temporary one).
pub async fn altered(conn: &mut PgConnection, views: bool) -> Result<Vec<Altered>, sqlx::Error> {
    let mut out = Vec::new();
    // Each function with how it runs and whose it is: a definer function
    // runs with its owner's rights, so an owner other than the ledger's
    // (the role the migrations ran as) is an alteration too.
    let installed: Vec<Installed> = sqlx::query_as(
        "SELECT p.proname::text AS name, p.prosrc AS body, p.prosecdef AS definer,
                coalesce(p.proconfig, '{}') AS settings, pg_get_userbyid(p.proowner)::text AS owner,
                pg_get_userbyid(l.relowner)::text AS ledger_owner
           FROM pg_proc p CROSS JOIN pg_class l
          WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f' AND p.proname LIKE 'hl\\_%'
            AND l.oid = 'public.ledger_entry'::regclass",
    )
    .fetch_all(&mut *conn)
    .await?;
    for (name, body) in FUNCTIONS {
        // With an overload beside it (reported below), the one whose body
        // is the migrations'.
        let mut named = installed.iter().filter(|f| f.name == *name);
        let Some(f) = named.clone().find(|f| f.body == *body).or_else(|| named.next()) else {
            out.push(Altered {
                kind: "function",
                name: (*name).to_owned(),
                problem: "missing".into(),
            });
            continue;
        };
        let mut problem = |problem: String| {
            out.push(Altered {
                kind: "function",
                name: (*name).to_owned(),
                problem,
            })
        };
        if f.body != *body {
            problem("its body is not the migrations' (replaced)".into());
        }
        if let Some((_, definer, settings)) = FUNCTION_SETTINGS.iter().find(|(n, _, _)| n == name) {
            if f.definer != *definer {
                problem(if f.definer {
                    "runs as its owner (SECURITY DEFINER); the migrations made it run as its caller".into()
                } else {
                    "runs as its caller; the migrations made it run as its owner (SECURITY DEFINER)".into()
                });
            }
            let mut have: Vec<String> = f.settings.iter().map(|s| normalized_setting(s)).collect();
            have.sort();
            if have != *settings {
                problem(format!(
                    "its settings are [{}], not the migrations' [{}] (ALTER FUNCTION … SET)",
                    f.settings.join("; "),
                    settings.join("; ")
                ));
            }
        }
        if f.owner != f.ledger_owner {
            problem(format!(
                "belongs to {}, not to the ledger's owner {} (ALTER FUNCTION … OWNER TO)",
                f.owner, f.ledger_owner
            ));
        }
    }
    for Installed { name, .. } in &installed {
        if !FUNCTIONS.iter().any(|(n, _)| n == name) {
            out.push(Altered {
                kind: "function",
                name: name.clone(),
                problem: "not installed by any migration".into(),
            });
        }
    }
    // Functions no migration made in the ledger's schemas, and a second
    // function of a migration's name (an overload): the ledger's functions
    // run with `search_path = public, pg_temp`, so a call in them resolves
    // among these too, and an overload that matches its arguments better
    // (an `integer` where the migrations' takes `bigint`) is called instead
    // of the migrations' own, whose body the checks above find unchanged.
    // Functions of an extension (`CREATE EXTENSION` into public) are the
    // extension's, not findings; but every function of an `hl_*` name is
    // counted, an extension's too (`ALTER EXTENSION … ADD FUNCTION` would
    // otherwise hide an overload).
    let names: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT n.nspname::text, p.proname::text, count(*)
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname IN ('public', 'audit')
            AND (p.proname LIKE 'hl\\_%' OR n.nspname <> 'public'
                 OR NOT EXISTS (SELECT 1 FROM pg_depend d
                                 WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'))
          GROUP BY 1, 2
          ORDER BY 1, 2",
    )
    .fetch_all(&mut *conn)
    .await?;
    for (schema, name, count) in names {
        if schema != "public" || !name.starts_with("hl_") {
            // (`hl_*` functions of public no migration made are reported
            // above and below.)
            out.push(Altered {
                kind: "function",
                name: format!("{schema}.{name}"),
                problem: format!(
                    "not installed by any migration ({count} definition{}; a call in the ledger's functions may \
                     resolve to it)",
                    if count == 1 { "" } else { "s" }
                ),
            });
        } else if count > 1 && (FUNCTIONS.iter().any(|(n, _)| *n == name) || AGGREGATES.iter().any(|a| a.name == name))
        {
            // (An `hl_*` name no migration defines is reported above, once
            // for each definition.)
            out.push(Altered {
                kind: "function",
                name,
                problem: format!(
                    "defined {count} times: the migrations define it once (an overload, which a call may resolve \
                     to instead)"
                ),
            });
        }
    }
    // Aggregates: a seal is a fold of its items by hl_seal_chain, so one
    // replaced (CREATE OR REPLACE AGGREGATE with another transition
    // function) would make every seal recompute to whatever it says.
    let aggregates: Vec<Aggregate<String>> = sqlx::query_as(
        "SELECT p.proname::text AS name, tn.nspname || '.' || t.proname AS transition,
                lower(format_type(a.aggtranstype, NULL)) AS state, coalesce(a.agginitval, '') AS initial,
                coalesce(fn.nspname || '.' || f.proname, '') AS last
           FROM pg_aggregate a JOIN pg_proc p ON p.oid = a.aggfnoid
           JOIN pg_proc t ON t.oid = a.aggtransfn JOIN pg_namespace tn ON tn.oid = t.pronamespace
           LEFT JOIN pg_proc f ON f.oid = a.aggfinalfn LEFT JOIN pg_namespace fn ON fn.oid = f.pronamespace
          WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'hl\\_%'",
    )
    .fetch_all(&mut *conn)
    .await?;
    let or_none = |f: &str| if f.is_empty() { "none".to_owned() } else { f.to_owned() };
    // The migrations name functions of `public`; the database's are named
    // with their schema, whatever the session's search path.
    let public = |f: &str| {
        if f.is_empty() || f.contains('.') {
            f.to_owned()
        } else {
            format!("public.{f}")
        }
    };
    for want in AGGREGATES {
        let (transition, last) = (public(want.transition), public(want.last));
        match aggregates.iter().find(|a| a.name == want.name) {
            None => out.push(Altered {
                kind: "aggregate",
                name: want.name.to_owned(),
                problem: "missing".into(),
            }),
            Some(have)
                if (have.transition.as_str(), have.state.as_str(), have.initial.as_str(), have.last.as_str())
                    != (transition.as_str(), want.state, want.initial, last.as_str()) =>
            {
                out.push(Altered {
                    kind: "aggregate",
                    name: want.name.to_owned(),
                    problem: format!(
                        "folds with {} over {} from '{}' (final: {}), not the migrations' {} over {} from '{}' (final: {})",
                        have.transition,
                        have.state,
                        have.initial,
                        or_none(&have.last),
                        transition,
                        want.state,
                        want.initial,
                        or_none(&last),
                    ),
                })
            }
            Some(_) => {}
        }
    }
    for have in &aggregates {
        if !AGGREGATES.iter().any(|a| a.name == have.name) {
            out.push(Altered {
                kind: "aggregate",
                name: have.name.clone(),
                problem: "not installed by any migration".into(),
            });
        }
    }
    let triggers: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT c.relname::text, t.tgname::text,
                CASE WHEN p.pronamespace = 'public'::regnamespace THEN p.proname::text
                     ELSE p.pronamespace::regnamespace::text || '.' || p.proname END,
                t.tgenabled::text
           FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid
          WHERE NOT t.tgisinternal AND c.relnamespace = 'public'::regnamespace",
    )
    .fetch_all(&mut *conn)
    .await?;
    for (table, trigger, function, enabled) in TRIGGERS {
        let name = format!("{trigger} on {table}");
        match triggers.iter().find(|(t, g, _, _)| t == table && g == trigger) {
            None => out.push(Altered {
                kind: "trigger",
                name,
                problem: "missing (dropped)".into(),
            }),
            Some((_, _, f, _)) if f != function => out.push(Altered {
                kind: "trigger",
                name,
                problem: format!("calls {f}, not {function}"),
            }),
            Some((_, _, _, e)) if !e.starts_with(*enabled) => out.push(Altered {
                kind: "trigger",
                name,
                problem: match e.as_str() {
                    "D" => "disabled".into(),
                    _ => format!("enabled as {e}, not {enabled}"),
                },
            }),
            Some(_) => {}
        }
    }
    for (table, trigger, _, _) in &triggers {
        if !TRIGGERS.iter().any(|(t, g, _, _)| t == table && g == trigger) {
            out.push(Altered {
                kind: "trigger",
                name: format!("{trigger} on {table}"),
                problem: "not installed by any migration".into(),
            });
        }
    }
    if !views {
        return Ok(out);
    }
    // Views: each created again, temporarily, from the migrations' query.
    sqlx::raw_sql("BEGIN").execute(&mut *conn).await?;
    let views = compare_views(&mut *conn).await;
    sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
    out.extend(views?);
    Ok(out)
}

async fn compare_views(conn: &mut PgConnection) -> Result<Vec<Altered>, sqlx::Error> {
    let mut out = Vec::new();
    for (i, (name, query)) in AUDIT_VIEWS.iter().enumerate() {
        let installed: Option<String> =
            sqlx::query_scalar("SELECT pg_get_viewdef(c.oid, true) FROM pg_class c WHERE c.relnamespace = 'audit'::regnamespace AND c.relname = $1 AND c.relkind = 'v'")
                .bind(name)
                .fetch_optional(&mut *conn)
                .await?;
        let Some(installed) = installed else {
            out.push(Altered {
                kind: "view",
                name: format!("audit.{name}"),
                problem: "missing".into(),
            });
            continue;
        };
        sqlx::raw_sql(&format!("SAVEPOINT v{i}")).execute(&mut *conn).await?;
        let expected = match sqlx::raw_sql(&format!("CREATE TEMP VIEW hl_expected_{i} AS {query}"))
            .execute(&mut *conn)
            .await
        {
            Ok(_) => {
                sqlx::query_scalar::<_, String>(&format!(
                    "SELECT pg_get_viewdef('pg_temp.hl_expected_{i}'::regclass, true)"
                ))
                .fetch_one(&mut *conn)
                .await?
            }
            Err(e) => {
                sqlx::raw_sql(&format!("ROLLBACK TO SAVEPOINT v{i}"))
                    .execute(&mut *conn)
                    .await?;
                out.push(Altered {
                    kind: "view",
                    name: format!("audit.{name}"),
                    problem: format!("its migration's query no longer runs here: {e}"),
                });
                continue;
            }
        };
        if expected != installed {
            out.push(Altered {
                kind: "view",
                name: format!("audit.{name}"),
                problem: "its query is not the migrations' (replaced)".into(),
            });
        }
    }
    Ok(out)
}
