//! Rebuild when a migration is added: `sqlx::migrate!` embeds the
//! migrations directory, and cargo would not notice a new file on its own.
//!
//! Also reads the migrations for the definitions `hpc-ledger audit` checks
//! the database against (issue 13, item 6): the final body of every SQL
//! function the migrations create, and of every view in the `audit` schema.
//! They are written to `$OUT_DIR/definitions.rs` (see `src/db/definitions.rs`):
//! an owner who replaces `hl_refuse_change()` or a view the audit reads is
//! found by a binary built from the migrations, not from the database.
//! With each function go how it runs: `SECURITY DEFINER` or not, and its
//! `SET` clauses (`search_path` above all), from its `CREATE` and any later
//! `ALTER FUNCTION`: an owner who points a definer function's search path
//! elsewhere changes what it does without touching its body. And every
//! aggregate (`hl_seal_chain`, which every seal is computed with): its
//! transition and final functions, state type and initial state.

use std::collections::BTreeMap;
use std::fmt::Write as _;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    git_commit();
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir("migrations")
        .expect("the migrations directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    let mut functions: BTreeMap<String, String> = BTreeMap::new();
    let mut runs_as: BTreeMap<String, RunsAs> = BTreeMap::new();
    let mut aggregates: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut views: BTreeMap<String, String> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a readable migration");
        for statement in statements(&text) {
            let head = strip_leading_comments(statement);
            let lower = head.to_ascii_lowercase();
            let words: Vec<&str> = lower.split_whitespace().collect();
            if words.starts_with(&["create", "function"]) || words.starts_with(&["create", "or", "replace", "function"])
            {
                let (name, _) = named_after(head, &lower, "function");
                if let Some(body) = first_dollar_quoted(head) {
                    functions.insert(name.clone(), body.to_owned());
                    // CREATE OR REPLACE sets every property anew: what the
                    // statement says around its body, or the default.
                    let mut r = RunsAs::default();
                    r.apply(&outside_dollar_quotes(head));
                    runs_as.insert(name, r);
                }
            } else if words.starts_with(&["create", "aggregate"])
                || words.starts_with(&["create", "or", "replace", "aggregate"])
            {
                // CREATE AGGREGATE name(args) (SFUNC = f, STYPE = t, …)
                let (name, after) = named_after(head, &lower, "aggregate");
                let options = after
                    .find(')')
                    .and_then(|n| {
                        let rest = &after[n + 1..];
                        let open = rest.find('(')?;
                        let close = rest.rfind(')')?;
                        Some(&rest[open + 1..close])
                    })
                    .unwrap_or_default();
                let mut spec = BTreeMap::new();
                for option in options.split(',') {
                    if let Some((k, v)) = option.split_once('=') {
                        let v: String = v.trim().trim_matches('\'').to_ascii_lowercase();
                        spec.insert(k.trim().to_ascii_lowercase(), v);
                    }
                }
                aggregates.insert(name, spec);
            } else if words.starts_with(&["alter", "function"]) {
                // ALTER FUNCTION name(args) action …
                let (name, after) = named_after(head, &lower, "function");
                let actions = after.find(')').map_or("", |n| &after[n + 1..]);
                if let Some(r) = runs_as.get_mut(&name) {
                    r.apply(actions);
                }
            } else if words.starts_with(&["drop", "function"]) {
                // DROP FUNCTION [IF EXISTS] name(...)
                let name = words[2..]
                    .iter()
                    .find(|w| !matches!(**w, "if" | "exists"))
                    .map(|w| w.split(['(', ';']).next().unwrap_or_default().to_owned())
                    .unwrap_or_default();
                functions.remove(&name);
                runs_as.remove(&name);
            } else if words.starts_with(&["create", "view"]) || words.starts_with(&["create", "or", "replace", "view"])
            {
                let at = lower.find("view").expect("seen") + "view".len();
                let rest = head[at..].trim_start();
                let Some(name) = rest.strip_prefix("audit.") else {
                    continue;
                };
                let name_end = name.find(|c: char| c.is_whitespace()).unwrap_or(name.len());
                let (view, tail) = name.split_at(name_end);
                let tail = tail.trim_start();
                if tail.len() >= 2 && tail[..2].eq_ignore_ascii_case("as") {
                    views.insert(view.to_owned(), tail[2..].trim().to_owned());
                }
            } else if words.starts_with(&["alter", "view"]) && words.len() >= 6 && words[3] == "rename" {
                // ALTER VIEW audit.a RENAME TO b
                let from = words[2].trim_start_matches("audit.").to_owned();
                let to = words[5].trim_end_matches(';').to_owned();
                if let Some(body) = views.remove(&from) {
                    views.insert(to, body);
                }
            }
        }
    }
    let mut out = String::new();
    out.push_str("/// Final body of every SQL function the migrations create (name, `prosrc`).\n");
    out.push_str("pub const FUNCTIONS: &[(&str, &str)] = &[\n");
    for (name, body) in &functions {
        let _ = writeln!(out, "    ({name:?}, {body:?}),");
    }
    out.push_str("];\n\n/// How every such function runs: (name, `SECURITY DEFINER`, its `SET`\n");
    out.push_str("/// clauses as `name=value`, lowercase, without spaces or quotes, sorted).\n");
    out.push_str("pub const FUNCTION_SETTINGS: &[(&str, bool, &[&str])] = &[\n");
    for (name, r) in &runs_as {
        let _ = writeln!(out, "    ({name:?}, {:?}, &{:?}),", r.definer, r.settings);
    }
    out.push_str("];\n\n/// Every aggregate the migrations create: (name, transition function,\n");
    out.push_str("/// state type, initial state, final function; \"\" for none), lowercase.\n");
    out.push_str("pub const AGGREGATES: &[Aggregate] = &[\n");
    for (name, spec) in &aggregates {
        let get = |k: &str| spec.get(k).cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "    Aggregate {{ name: {name:?}, transition: {:?}, state: {:?}, initial: {:?}, last: {:?} }},",
            get("sfunc"),
            get("stype"),
            get("initcond"),
            get("finalfunc")
        );
    }
    out.push_str("];\n\n/// Final definition of every view in the `audit` schema (name, the query after AS).\n");
    out.push_str("pub const AUDIT_VIEWS: &[(&str, &str)] = &[\n");
    for (name, body) in &views {
        let _ = writeln!(out, "    ({name:?}, {body:?}),");
    }
    out.push_str("];\n");
    let dest = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("definitions.rs");
    std::fs::write(dest, out).expect("writing definitions.rs");
}

/// The statements of a SQL script: split at `;` outside quotes, dollar
/// quotes and comments.
fn statements(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut start) = (0, 0);
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                i += 1;
                while i < b.len() {
                    if b[i] == q {
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'$' => {
                // $tag$ … $tag$
                let tag_end = sql[i + 1..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map(|n| i + 1 + n);
                match tag_end {
                    Some(e) if b[e] == b'$' => {
                        let tag = &sql[i..=e];
                        match sql[e + 1..].find(tag) {
                            Some(n) => i = e + 1 + n + tag.len(),
                            None => i = b.len(),
                        }
                    }
                    _ => i += 1,
                }
            }
            b';' => {
                out.push(&sql[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    if !sql[start..].trim().is_empty() {
        out.push(&sql[start..]);
    }
    out
}

fn strip_leading_comments(s: &str) -> &str {
    let mut s = s.trim_start();
    loop {
        if let Some(rest) = s.strip_prefix("--") {
            s = rest.find('\n').map_or("", |n| &rest[n + 1..]).trim_start();
        } else if let Some(rest) = s.strip_prefix("/*") {
            s = rest.find("*/").map_or("", |n| &rest[n + 2..]).trim_start();
        } else {
            return s;
        }
    }
}

/// The name after the first `keyword` of a statement (`CREATE FUNCTION
/// name(…`), and the statement's text after the keyword.
fn named_after<'a>(head: &'a str, lower: &str, keyword: &str) -> (String, &'a str) {
    let after = &head[lower.find(keyword).expect("the statement's keyword") + keyword.len()..];
    let name = after
        .trim_start()
        .split(['(', ' '])
        .next()
        .unwrap_or_default()
        .to_owned();
    (name, after)
}

/// How a function runs, as its statements declare it.
#[derive(Default)]
struct RunsAs {
    definer: bool,
    settings: Vec<String>,
}

impl RunsAs {
    /// Apply the options of a `CREATE FUNCTION` (outside its body) or the
    /// actions of an `ALTER FUNCTION`: `SECURITY DEFINER | INVOKER`,
    /// `SET name = value | TO value`, `RESET name | ALL`.
    fn apply(&mut self, options: &str) {
        const STOP: &[&str] = &[
            "as",
            "language",
            "security",
            "set",
            "reset",
            "stable",
            "immutable",
            "volatile",
            "parallel",
            "strict",
            "cost",
            "rows",
            "leakproof",
            "not",
            "called",
            "returns",
            "support",
            "window",
            "external",
        ];
        let text = without_comments(options);
        let original: Vec<&str> = text.split_whitespace().collect();
        let lower = text.to_ascii_lowercase();
        let tokens: Vec<&str> = lower.split_whitespace().collect();
        let mut i = 0;
        while i < tokens.len() {
            match tokens[i] {
                "security" if tokens.get(i + 1) == Some(&"definer") => self.definer = true,
                "security" if tokens.get(i + 1) == Some(&"invoker") => self.definer = false,
                "reset" => match tokens.get(i + 1) {
                    Some(&"all") => self.settings.clear(),
                    Some(name) => {
                        let name = name.trim_end_matches(';');
                        self.settings.retain(|s| s.split('=').next() != Some(name));
                    }
                    None => {}
                },
                "set" => {
                    let end = (i + 1..tokens.len())
                        .find(|&j| STOP.contains(&tokens[j]))
                        .unwrap_or(tokens.len());
                    // The clause in its own case (values keep theirs).
                    let clause = original[i + 1..end].join(" ");
                    let (name, value) = match clause.split_once('=') {
                        Some((n, v)) => (n.to_owned(), v.to_owned()),
                        None => {
                            // SET name TO value: the second word is TO.
                            let mut words = clause.splitn(3, ' ');
                            let n = words.next().unwrap_or_default();
                            let _to = words.next();
                            (n.to_owned(), words.next().unwrap_or_default().to_owned())
                        }
                    };
                    let setting = normalized_setting(&name, &value);
                    let name = setting.split('=').next().unwrap_or_default().to_owned();
                    self.settings.retain(|s| s.split('=').next() != Some(name.as_str()));
                    self.settings.push(setting);
                    self.settings.sort();
                    i = end;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

/// SQL text without its `--` and `/* */` comments (options text only: no
/// quoted `--` is expected there).
fn without_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while !rest.is_empty() {
        match (rest.find("--"), rest.find("/*")) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |n| &rest[l + n..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = rest[b..].find("*/").map_or("", |n| &rest[b + n + 2..]);
                out.push(' ');
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out
}

/// `name=value` as `src/db/definitions.rs` compares it with `proconfig`:
/// the name lowercase; the value as PostgreSQL keeps it, less whitespace
/// (string quotes dropped, as PostgreSQL drops them; case and identifier
/// quotes kept: `"Public"` is another schema than `public`).
fn normalized_setting(name: &str, value: &str) -> String {
    let name: String = name
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    let value: String = value
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '\'' && *c != ';')
        .collect();
    format!("{name}={value}")
}

/// A statement without the text inside its `$$…$$` (the body).
fn outside_dollar_quotes(s: &str) -> String {
    match s.find("$$") {
        Some(open) => match s[open + 2..].find("$$") {
            Some(close) => format!("{} {}", &s[..open], &s[open + 2 + close + 2..]),
            None => s[..open].to_owned(),
        },
        None => s.to_owned(),
    }
}

/// The text inside the first `$$…$$` of a statement.
fn first_dollar_quoted(s: &str) -> Option<&str> {
    let open = s.find("$$")?;
    let close = s[open + 2..].find("$$")?;
    Some(&s[open + 2..open + 2 + close])
}

/// The commit this binary is built from, for `hpc-ledger --version`
/// ("unknown" outside a git checkout).
fn git_commit() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=HPC_LEDGER_COMMIT={commit}");
    for path in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
