//! Job pricing: from what a job held and for how long, under the rate card in
//! force, its charge lines with every intermediate value (docs/rules.md R1–R5, D1, D3,
//! D8).
//!
//! ```text
//! requested cores  (D3: what the job held)
//! effective cores  = requested memory / memory per core          (R2, exact, 12 places)
//! charged cores    = single node: max(requested, effective)       (R2, R3)
//!                    multi-node:  max(nodes × cores per node, requested)   (R3)
//! core-hours       = charged cores × wall seconds / 3600          (R1, 12 places)
//! gpu-hours        = GPUs × wall seconds / 3600                   (R5, 12 places)
//! amount           = quantity × rate, exact; rounded half away from zero to cents (D8)
//! ```
//!
//! The multi-node `max(…, requested)` only matters when the rate card's
//! cores per node is smaller than what the scheduler says the job held (a
//! card out of date, or a scheduler counting hardware threads): the job is
//! then charged for the cores it held, never fewer.

use rust_decimal::Decimal;
use serde::Serialize;

use super::units::{
    Bytes, CoreHour, Cut, EXACT_SCALE, GpuHour, Metric, Priced, QUANTITY_SCALE, Quantity, Rate, div_round, exact_mul,
    ratio,
};

/// What a job held (docs/rules.md D3), in totals over all its nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct JobShape {
    pub nodes: u32,
    pub cores: u32,
    /// Requested memory for the whole job; `None` when the job did not ask
    /// for memory (then R2 does not apply).
    pub memory: Option<Bytes>,
    pub gpus: u32,
}

/// The prices and node facts of one node type in force at one time (docs/rules.md
/// D5): what a rate card row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RateCard {
    pub core_hour: Decimal,
    pub gpu_hour: Decimal,
    pub memory_per_core: Bytes,
    pub cores_per_node: u32,
}

/// Sanity limits: a record beyond these is bad input, not a job.
pub mod limits {
    /// About a year.
    pub const MAX_WALL_SECONDS: i64 = 366 * 24 * 3600;
    pub const MAX_NODES: u32 = 1_000_000;
    pub const MAX_CORES: u32 = 100_000_000;
    pub const MAX_GPUS: u32 = 10_000_000;
    /// 1 EiB.
    pub const MAX_MEMORY_BYTES: u64 = 1 << 60;
    /// 64 TiB: more memory than any one node has (the largest shared-memory
    /// machines hold 32–48 TiB). A job's memory divided by its nodes above
    /// this is a unit error or a forged record, not a job (issue 13 item 12;
    /// new charges only).
    pub const MAX_MEMORY_PER_NODE: u64 = 64 << 40;
}

/// Why a job cannot be priced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PricingError {
    #[error("the job ends before it starts ({0} s of wall time)")]
    NegativeDuration(i64),
    #[error("the job ran for {0} s, more than a year: that is not a real job")]
    AbsurdDuration(i64),
    #[error("the job holds no {0}")]
    Zero(&'static str),
    #[error("the job holds {value} {what}, more than the limit of {limit}")]
    Absurd { what: &'static str, value: u64, limit: u64 },
    #[error("the charge is too large to compute exactly (more than 28 significant digits)")]
    Overflow,
    #[error(
        "the job holds {memory} of memory on {nodes} node(s), more than {limit} per node, which no node has (a unit error?)"
    )]
    MemoryPerNode { memory: Bytes, nodes: u32, limit: Bytes },
}

/// Whether `shape` holds more memory per node than any node has
/// ([`limits::MAX_MEMORY_PER_NODE`]). Not part of [`validate`]: it applies
/// to new charges and quotes, never to a record charged before the rule.
pub fn check_memory_per_node(shape: &JobShape) -> Result<(), PricingError> {
    if let Some(m) = shape.memory
        && u128::from(m.0) > u128::from(shape.nodes.max(1)) * u128::from(limits::MAX_MEMORY_PER_NODE)
    {
        return Err(PricingError::MemoryPerNode {
            memory: m,
            nodes: shape.nodes,
            limit: Bytes(limits::MAX_MEMORY_PER_NODE),
        });
    }
    Ok(())
}

/// Which rule set the charged cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChargeBasis {
    /// The cores it held (R1).
    Cores,
    /// Its memory, converted to effective cores (R2).
    Memory,
    /// Every core of every node it ran on (R3).
    WholeNodes,
    /// Its memory, capped at its node's cores: a single-node job is never
    /// charged more than a whole node (charging rules 2).
    WholeNode,
}

impl ChargeBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            ChargeBasis::Cores => "cores",
            ChargeBasis::Memory => "memory",
            ChargeBasis::WholeNodes => "whole_nodes",
            ChargeBasis::WholeNode => "whole_node",
        }
    }
}

/// The version of the charging rules that prices a charge (docs/rules.md):
/// each ledger entry records it, and the audit recomputes it by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ChargingRules {
    /// The amount is the 12-place quantity times the rate, rounded to cents.
    V1,
    /// The amount is the exact value rounded once to cents; a single-node
    /// job is charged at most a whole node (from migration 0021).
    V2,
    /// Priced as version 2; a refund settles in cents: what a charge's
    /// refunds leave charged, in cents, is the exact net they leave,
    /// rounded, and nothing once refunded in full (from migration 0055;
    /// `entries::refund_cents`).
    V3,
}

impl ChargingRules {
    /// The rules new charges are priced by.
    pub const CURRENT: ChargingRules = ChargingRules::V3;

    /// The number stored in `ledger_entry.charging_rules`.
    pub fn number(self) -> i16 {
        match self {
            ChargingRules::V1 => 1,
            ChargingRules::V2 => 2,
            ChargingRules::V3 => 3,
        }
    }

    pub fn from_number(n: i16) -> Option<ChargingRules> {
        match n {
            1 => Some(ChargingRules::V1),
            2 => Some(ChargingRules::V2),
            3 => Some(ChargingRules::V3),
            _ => None,
        }
    }
}

/// Every intermediate quantity of a job's price: what an auditor checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobPrice {
    pub nodes: u32,
    pub requested_cores: u32,
    pub requested_memory: Option<Bytes>,
    pub memory_per_core: Bytes,
    /// Requested memory ÷ memory per core (R2); `None` without a memory request.
    pub effective_cores: Option<Decimal>,
    pub cores_per_node: u32,
    /// Nodes × cores per node, for a multi-node job (R3).
    pub whole_node_cores: Option<u32>,
    pub charged_cores: Decimal,
    pub basis: ChargeBasis,
    pub gpus: u32,
    pub wall_seconds: i64,
    pub hours: Decimal,
    /// Core-hours always; GPU-hours when the job held GPUs (R5).
    pub lines: Vec<Priced>,
    /// The charging rules that priced it.
    pub rules: ChargingRules,
}

impl JobPrice {
    /// The sum of the lines' rounded amounts: what the job costs on a statement.
    pub fn total(&self) -> Decimal {
        self.lines.iter().map(|l| l.amount).sum()
    }
}

fn check_limit(what: &'static str, value: u64, limit: u64) -> Result<(), PricingError> {
    if value > limit {
        return Err(PricingError::Absurd { what, value, limit });
    }
    Ok(())
}

/// Check that a job's shape and duration are plausible, before pricing or
/// storing it.
pub fn validate(shape: &JobShape, wall_seconds: i64) -> Result<(), PricingError> {
    if wall_seconds < 0 {
        return Err(PricingError::NegativeDuration(wall_seconds));
    }
    if wall_seconds > limits::MAX_WALL_SECONDS {
        return Err(PricingError::AbsurdDuration(wall_seconds));
    }
    if shape.nodes == 0 {
        return Err(PricingError::Zero("nodes"));
    }
    if shape.cores == 0 {
        return Err(PricingError::Zero("cores"));
    }
    check_limit("nodes", shape.nodes.into(), limits::MAX_NODES.into())?;
    check_limit("cores", shape.cores.into(), limits::MAX_CORES.into())?;
    check_limit("GPUs", shape.gpus.into(), limits::MAX_GPUS.into())?;
    if let Some(m) = shape.memory {
        check_limit("bytes of memory", m.0, limits::MAX_MEMORY_BYTES)?;
    }
    Ok(())
}

/// Price a job that held `shape` for `wall_seconds` under `card`, by the
/// current charging rules.
pub fn price_job(shape: &JobShape, wall_seconds: i64, card: &RateCard) -> Result<JobPrice, PricingError> {
    price_job_by(ChargingRules::CURRENT, shape, wall_seconds, card)
}

/// Price a job by a given version of the charging rules.
pub fn price_job_by(
    rules: ChargingRules,
    shape: &JobShape,
    wall_seconds: i64,
    card: &RateCard,
) -> Result<JobPrice, PricingError> {
    match rules {
        ChargingRules::V1 => price_job_v1(shape, wall_seconds, card),
        rules @ (ChargingRules::V2 | ChargingRules::V3) => price_job_v2(rules, shape, wall_seconds, card),
    }
}

/// Version 2 (and 3, which prices the same): the exact value of each line,
/// rounded once.
fn price_job_v2(
    rules: ChargingRules,
    shape: &JobShape,
    wall_seconds: i64,
    card: &RateCard,
) -> Result<JobPrice, PricingError> {
    validate(shape, wall_seconds)?;
    let over = |n: &[Decimal], d: &[Decimal], dp, cut| ratio(n, d, dp, cut).ok_or(PricingError::Overflow);
    let mpc = card.memory_per_core.as_decimal();
    let cores = Decimal::from(shape.cores);
    let effective_cores = match shape.memory {
        Some(m) => Some(over(&[m.as_decimal()], &[mpc], QUANTITY_SCALE, Cut::Round)?),
        None => None,
    };
    // Charged cores as a fraction: memory ÷ memory per core when memory
    // decides, whole cores otherwise.
    let (units, per, whole_node_cores, basis) = if shape.nodes > 1 {
        let whole = shape
            .nodes
            .checked_mul(card.cores_per_node)
            .ok_or(PricingError::Overflow)?;
        (
            Decimal::from(whole.max(shape.cores)),
            Decimal::ONE,
            Some(whole),
            ChargeBasis::WholeNodes,
        )
    } else {
        let node = card.cores_per_node.max(shape.cores);
        let above = |m: Decimal, c: u32| exact_mul(Decimal::from(c), mpc).is_some_and(|c| m > c);
        match shape.memory.map(Bytes::as_decimal) {
            Some(m) if above(m, node) => (Decimal::from(node), Decimal::ONE, None, ChargeBasis::WholeNode),
            Some(m) if above(m, shape.cores) => (m, mpc, None, ChargeBasis::Memory),
            _ => (cores, Decimal::ONE, None, ChargeBasis::Cores),
        }
    };
    let seconds = Decimal::from(wall_seconds);
    let hour = Decimal::from(3600);
    let charged_cores = over(&[units], &[per], QUANTITY_SCALE, Cut::Round)?;
    let line = |metric: Metric, num: &[Decimal], den: &[Decimal], rate: Decimal| -> Result<Priced, PricingError> {
        let quantity = over(num, den, QUANTITY_SCALE, Cut::Round)?;
        let mut with_rate = num.to_vec();
        with_rate.push(rate);
        let exact = over(&with_rate, den, EXACT_SCALE, Cut::Truncate)?;
        Ok(Priced::exact(metric, quantity, rate, exact))
    };
    let mut lines = vec![line(
        Metric::CoreHours,
        &[units, seconds],
        &[per, hour],
        card.core_hour,
    )?];
    if shape.gpus > 0 {
        lines.push(line(
            Metric::GpuHours,
            &[Decimal::from(shape.gpus), seconds],
            &[hour],
            card.gpu_hour,
        )?);
    }
    Ok(JobPrice {
        nodes: shape.nodes,
        requested_cores: shape.cores,
        requested_memory: shape.memory,
        memory_per_core: card.memory_per_core,
        effective_cores,
        cores_per_node: card.cores_per_node,
        whole_node_cores,
        charged_cores,
        basis,
        gpus: shape.gpus,
        wall_seconds,
        hours: over(&[seconds], &[hour], QUANTITY_SCALE, Cut::Round)?,
        lines,
        rules,
    })
}

/// Version 1: each quantity rounded to 12 places, the amount from it.
fn price_job_v1(shape: &JobShape, wall_seconds: i64, card: &RateCard) -> Result<JobPrice, PricingError> {
    validate(shape, wall_seconds)?;
    let requested = Decimal::from(shape.cores);
    let effective_cores = match shape.memory {
        Some(m) => Some(
            div_round(m.as_decimal(), card.memory_per_core.as_decimal(), QUANTITY_SCALE)
                .ok_or(PricingError::Overflow)?,
        ),
        None => None,
    };
    let (charged_cores, whole_node_cores, basis) = if shape.nodes > 1 {
        let whole = shape
            .nodes
            .checked_mul(card.cores_per_node)
            .ok_or(PricingError::Overflow)?;
        (
            Decimal::from(whole.max(shape.cores)),
            Some(whole),
            ChargeBasis::WholeNodes,
        )
    } else {
        match effective_cores {
            Some(eff) if eff > requested => (eff, None, ChargeBasis::Memory),
            _ => (requested, None, ChargeBasis::Cores),
        }
    };
    let seconds = Decimal::from(wall_seconds);
    let per_hour = |units: Decimal| -> Result<Decimal, PricingError> {
        let unit_seconds = units.checked_mul(seconds).ok_or(PricingError::Overflow)?;
        div_round(unit_seconds, Decimal::from(3600), QUANTITY_SCALE).ok_or(PricingError::Overflow)
    };
    let core_hours = Quantity::<CoreHour>::new(per_hour(charged_cores)?);
    let mut lines = vec![Priced::new(core_hours, Rate::new(card.core_hour)).ok_or(PricingError::Overflow)?];
    if shape.gpus > 0 {
        let gpu_hours = Quantity::<GpuHour>::new(per_hour(Decimal::from(shape.gpus))?);
        lines.push(Priced::new(gpu_hours, Rate::new(card.gpu_hour)).ok_or(PricingError::Overflow)?);
    }
    Ok(JobPrice {
        nodes: shape.nodes,
        requested_cores: shape.cores,
        requested_memory: shape.memory,
        memory_per_core: card.memory_per_core,
        effective_cores,
        cores_per_node: card.cores_per_node,
        whole_node_cores,
        charged_cores,
        basis,
        gpus: shape.gpus,
        wall_seconds,
        hours: per_hour(Decimal::ONE)?,
        lines,
        rules: ChargingRules::V1,
    })
}

#[cfg(test)]
mod tests;
