//! Integration tests against the real services started by `scripts/test.sh`: Apache Kafka
//! and MariaDB (the MySQL-protocol stand-in for Doris). All in one
//! test binary; tests that stop a shared service live in their own binaries (tests/*.rs),
//! which cargo runs one after another.

mod altered_keys;
mod broker_auth;
mod check;
mod collation_merges;
mod completeness;
mod completeness_cover;
mod completeness_txn;
mod connect_evidence;
mod crash;
mod daemon_surface;
mod dead_letters;
mod dead_letters_more;
mod deleted_rows;
mod fake_connect;
mod fake_flink;
mod fake_http;
mod fake_registry;
mod faults;
mod figures;
mod flink_evidence;
mod handover_chain;
mod handover_generation;
mod handover_side;
mod input;
mod key_forms;
mod keys_at_scale;
mod multi;
mod offsets_interleaved;
mod overflow;
mod pipeline_group;
mod real_broker;
mod recreated;
mod replay;
mod routine_load;
mod scenarios;
mod schema_registry;
mod seed_config;
mod shared_and_stored;
mod stream_load_evidence;
mod support;
mod tail_assign;
mod tail_races;
mod time_scan;
mod typed_keys;
mod ui_ack;
mod ui_forward;
mod upsert_keys;
mod verdicts;
mod verdicts_more;
