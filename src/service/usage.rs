//! Usage reports (issue 18, item 2): what a project — or every project —
//! used and spent over a range of months, by user, cluster, node type,
//! month or rate class, from the ledger's own sums (`ledger_usage`,
//! migration 0032), kept per project, posting month and key as entries are
//! posted.

use serde::Serialize;
use sqlx::PgPool;

use crate::db::DbError;
use crate::db::usage::{self as udb, UsageRow};
use crate::domain::period::Month;

#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("unknown project {0}")]
    UnknownProject(String),
    #[error("--from {from} is after --to {to}")]
    Range { from: Month, to: Month },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<sqlx::Error> for UsageError {
    fn from(e: sqlx::Error) -> Self {
        UsageError::Db(e.into())
    }
}

/// How to group a usage report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum By {
    User,
    Cluster,
    NodeType,
    Month,
    /// The rate class of the card or storage rate that priced each charge.
    Class,
}

impl By {
    fn as_str(self) -> &'static str {
        match self {
            By::User => "user",
            By::Cluster => "cluster",
            By::NodeType => "node-type",
            By::Month => "month",
            By::Class => "class",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub from: Month,
    pub to: Month,
    pub by: By,
    pub rows: Vec<UsageRow>,
}

/// The usage of `project` (`None`: every project) from `from` to `to`
/// (months, inclusive), grouped by `by`.
pub async fn usage(pool: &PgPool, project: Option<&str>, from: Month, to: Month, by: By) -> Result<Usage, UsageError> {
    if from > to {
        return Err(UsageError::Range { from, to });
    }
    let mut tx = crate::db::begin_custom_plans(pool).await.map_err(DbError::from)?;
    let id = match project {
        Some(code) => Some(
            crate::service::project(&mut tx, code)
                .await?
                .map_err(UsageError::UnknownProject)?
                .id,
        ),
        None => None,
    };
    let rows = udb::usage(&mut tx, id, from.first_day(), to.first_day(), by.as_str()).await?;
    tx.commit().await.map_err(DbError::from)?;
    Ok(Usage { from, to, by, rows })
}
