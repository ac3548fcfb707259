//! hpc-ledger: a charge-back ledger for HPC centers. Finished batch jobs and
//! project storage quotas go in; priced, immutable ledger entries come out.

/// Pure charging rules: pricing, storage, periods, resource requests.
pub mod domain;
