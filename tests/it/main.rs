//! The integration tests: one binary (one link), every test on its own fresh
//! database cloned from a migrated template, against a real PostgreSQL:
//! `DATABASE_URL`'s server when set, else an embedded cluster of the tests'
//! own under `target/tmp`.

mod harness;

mod cli;
mod config_apply;
mod embedded;
mod fixtures;
mod import;
mod rounding;
mod schema;
