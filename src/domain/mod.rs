//! The pure core: charging rules, pricing and posting decisions. No database,
//! no clock, no I/O; everything it needs comes in as arguments.

pub mod budget;
pub mod catalog;
pub mod entries;
pub mod journal;
pub mod kinds;
pub mod names;
pub mod period;
pub mod posting;
pub mod pricing;
pub mod request;
pub mod rules;
pub mod storage;
pub mod units;
