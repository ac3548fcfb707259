//! Typed row ids, so a project id can never be passed where a cluster id is
//! expected. Plain data shared by every layer.

use serde::{Deserialize, Serialize};

macro_rules! id {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type)]
        #[sqlx(transparent)]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    )*};
}

id!(
    ClusterId,
    NodeTypeId,
    RateCardId,
    StorageRateId,
    ProjectId,
    /// A job run (cluster, job id, array index, submit, start).
    JobId,
    /// One recorded content of a job run.
    JobRecordId,
    LedgerEntryId,
    BillingRunId,
    /// A set of prices (internal, academic, commercial, ...).
    RateClassId,
    /// A dated percentage discount of a project or a class.
    DiscountId,
    /// An allocation entry (a grant, a reduction, half of a transfer).
    AllocationId,
    /// A hold (lien) on a project's balance for a job about to run.
    HoldId,
);
