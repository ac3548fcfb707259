//! The layering rules of ARCHITECTURE.md, checked on the source text (in the
//! style of rust-analyzer's tidy tests), so they are enforced, not just
//! written:
//!
//! - `domain/`, `ingest/` and `config/` are pure: no database, no async
//!   runtime, no clock, no filesystem (their tests may time themselves);
//! - query text and SQLSTATE matching live in `db/` only (and in the bench,
//!   whose baselines are SQL by nature).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The code of a file, without comments and without its test modules
/// (`#[cfg(test)]` to the end of the file: test modules come last, as
/// clippy's `items_after_test_module` makes them) — or nothing for a file of
/// tests.
fn code(path: &Path) -> Vec<(usize, String)> {
    let name = path.file_name().unwrap().to_string_lossy();
    if name == "tests.rs" || name.ends_with("_tests.rs") || path.components().any(|c| c.as_os_str() == "tests") {
        return Vec::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .enumerate()
        .take_while(|(_, l)| l.trim() != "#[cfg(test)]")
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l.to_owned()))
        .collect()
}

/// Every `(file:line, token)` of `tokens` in the code under `dirs`.
fn find(root: &Path, dirs: &[&str], skip: &[&str], tokens: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for dir in dirs {
        for file in rust_files(&root.join(dir)) {
            let rel = file.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if skip.iter().any(|s| rel.starts_with(s)) {
                continue;
            }
            for (line, text) in code(&file) {
                for t in tokens {
                    if text.contains(t) {
                        found.push(format!("{rel}:{line}: {t}"));
                    }
                }
            }
        }
    }
    found
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_pure_layers_touch_no_database_runtime_clock_or_filesystem() {
    let found = find(
        &root(),
        &["src/domain", "src/ingest", "src/config"],
        &[],
        &[
            "sqlx",
            "tokio",
            "Utc::now",
            "Local::now",
            "SystemTime",
            "Instant::now",
            "std::fs",
            "File::open",
            "File::create",
            "std::env",
        ],
    );
    assert_eq!(
        found,
        Vec::<String>::new(),
        "the pure layers must stay pure (ARCHITECTURE.md)"
    );
}

#[test]
fn query_text_and_sqlstates_live_in_db() {
    let found = find(
        &root(),
        &["src"],
        &["src/db/", "src/bench"],
        &[
            "sqlx::query",
            "query!(",
            "query_as!(",
            "query_scalar!(",
            "query_as(",
            "query_scalar(",
            "raw_sql(",
            ".code()",
            ".constraint()",
        ],
    );
    assert_eq!(found, Vec::<String>::new(), "SQL belongs in src/db/ (ARCHITECTURE.md)");
}

#[test]
fn the_tidy_checks_would_catch_a_violation() {
    // The checks themselves: a query in a service file and the clock in the
    // domain are found; comments and test modules are not.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tidy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src/service")).unwrap();
    std::fs::create_dir_all(dir.join("src/domain")).unwrap();
    std::fs::write(
        dir.join("src/service/x.rs"),
        "// sqlx::query in a comment\nfn f() { sqlx::query(\"SELECT 1\"); }\n#[cfg(test)]\nmod tests { fn g() { sqlx::query(\"\"); } }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/domain/y.rs"),
        "fn now() { let _ = chrono::Utc::now(); }\n",
    )
    .unwrap();
    assert_eq!(
        find(&dir, &["src"], &["src/db/"], &["sqlx::query"]),
        ["src/service/x.rs:2: sqlx::query"]
    );
    assert_eq!(
        find(&dir, &["src/domain"], &[], &["Utc::now"]),
        ["src/domain/y.rs:1: Utc::now"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
