//! hpc-ledger: a charge-back ledger for HPC centers. Finished batch jobs and
//! project storage quotas go in; priced, immutable ledger entries come out.

/// Pure charging rules: pricing, storage, periods, resource requests.
pub mod domain;

/// Parsers of scheduler accounting records (Slurm, PBS, JSON lines).
pub mod ingest;

/// The center configuration file: parse and validate (pure).
pub mod config;

/// The embedded default database: a private PostgreSQL cluster on demand.
pub mod embedded;

/// Typed row ids shared by every layer.
pub mod ids;

/// Everything that talks SQL, and which database to use.
pub mod db;

/// Use cases: each a transaction around the pure domain.
pub mod service;

/// Statements as documents people read: self-contained HTML.
pub mod document;

/// `hpc-ledger serve`: finished jobs pushed over HTTP (Slurm's jobcomp).
pub mod serve;

/// The command line.
pub mod cli;

/// Synthetic accounting data for measurements and tests.
pub mod synthetic;

/// `hpc-ledger bench`: speed measured against PostgreSQL's own.
pub mod bench;
