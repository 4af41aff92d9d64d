//! Unit tests of the audit loop's parts (no broker, no database server).

mod held_release;
