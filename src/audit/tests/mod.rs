//! Unit tests of the audit loop's parts (no broker, no database server).

mod acks;
mod closed_range;
mod connect;
mod counting;
mod dead_letters;
mod deleted;
mod divergence;
mod flink;
mod harness;
mod held_release;
mod persist;
mod restore;
mod retired;
mod review_read_to;
mod revocation;
mod round;
mod runtimes;
mod stream_load;
