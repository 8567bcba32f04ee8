//! Cron jobs (ojs-cron.md), the pure part: expression syntax ([`expr`]), when an
//! expression fires in a time zone ([`schedule`]), and the registration object ([`def`]).
//! Nothing here knows about the engine or the store; the runtime is `engine/cron/`.

pub mod def;
pub mod expr;
pub mod schedule;

#[cfg(test)]
mod tests;

pub use def::{CronDef, Overlap};
pub use schedule::{Kind, Occurrence, Schedule};
