//! Kafka Connect's evidence (SPEC "Pipeline position and evidence"): with `[audits.pipeline]
//! connect_url` and `connect_connector`, the auditor reads the connector's status and config
//! from the Connect REST API on a timer and keeps the changes it saw: a task that FAILED
//! (with its exception), RUNNING again (on which worker), a task that appeared or went. A
//! `skipped_by_restart` or `dropped_in_flight` gap then names the changes seen in its
//! commit step's window: "Kafka Connect task 0 of es-sink FAILED at T (exception), RUNNING
//! again at T2 on worker connect-2:8083"; a `dropped_in_flight` gap of a connector that
//! skips records it cannot convert (`errors.tolerance=all`) without a dead-letter queue
//! says that too. The sink connector's position stays its group (`connect-<name>`).
//!
//! Evidence only: it never holds, makes or changes a verdict. A source that cannot be read
//! leaves gaps as they were before this module existed, with one warning (and its state in
//! `/api/status`).
//!
//! `rest` reads Connect's documented JSON, `history` keeps the changes and explains a gap
//! (both pure), `poller` talks to the Connect REST API (through src/evidence/http.rs).

pub mod history;
pub mod poller;
pub mod rest;

pub use history::{History, Seen, StateEvent};
pub use poller::{ConnectSource, ConnectView, SharedView, SourceError};
pub use rest::{ConnectorStatus, ErrorHandling, RestError};
