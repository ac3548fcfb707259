//! The integration tests: one binary (one link), every test on its own fresh
//! database cloned from a migrated template, against a real PostgreSQL:
//! `DATABASE_URL`'s server when set, else an embedded cluster of the tests'
//! own under `target/tmp`.

mod harness;

mod archive;
mod bench;
mod budget;
mod classes;
mod cli;
mod config_apply;
mod deep;
mod docs;
mod embedded;
mod examples;
mod explain;
mod fixtures;
mod follow;
mod import;
mod journal;
mod month_end;
mod record_cli;
mod rejected;
mod reliability;
mod replica;
mod rounding;
mod rules_versions;
mod schema;
mod security;
mod serve;
mod storage;
mod tamper;
mod tidy;
mod usage;
mod web;
