//! The MySQL-protocol sink: tables of each shape and the rows in them.

use mysql_async::prelude::Queryable;

use super::*;

/// The table the documented example (`config/gap-auditor.toml`) audits.
pub const SEED_TABLE: &str = "dns_logs_from_flink01";

/// The shape of a sink table, which decides the rows the pipeline stand-in writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableShape {
    /// The seed's 9 columns plus the record's Kafka `partition` and `offset`
    /// ([`Db::create_dns_table`]).
    DnsWithCoordinates,
    /// Only the seed's 9 columns, as in the seed's Doris table ([`Db::create_seed_table`]).
    Seed,
    /// The seed's 9 columns with a PRIMARY KEY on the seed key, written with
    /// `INSERT … ON DUPLICATE KEY UPDATE` ([`Db::create_upsert_table`]): the MariaDB form of
    /// a Doris UNIQUE KEY table and of Flink's JDBC sink in upsert mode.
    SeedUpsert,
}

/// The test database.
#[derive(Clone)]
pub struct Db {
    pub pool: mysql_async::Pool,
}

impl Db {
    pub fn new() -> Self {
        Self::at(&mysql_url())
    }

    pub fn at(url: &str) -> Self {
        Self {
            pool: mysql_async::Pool::new(url),
        }
    }

    /// Creates the seed-shaped table with Kafka coordinate columns too. Key columns in
    /// `utf8mb4_bin`: case-sensitive, but PAD SPACE on MariaDB ('a' = 'a '), so NOT
    /// byte-exact like Doris. Kept on purpose: the sink (kind `mysql`) must notice and
    /// compare such columns byte-exactly itself, and every key_columns test on these tables
    /// exercises that (tests/it/keys_at_scale.rs; byte-exact tables use `utf8mb4_nopad_bin`).
    pub async fn create_dns_table(&self, table: &str) {
        let mut c = self.pool.get_conn().await.expect("mysql conn");
        c.query_drop(format!(
            "CREATE TABLE `{table}` (
                client_ip VARCHAR(80) COLLATE utf8mb4_bin,
                domain LONGTEXT COLLATE utf8mb4_bin,
                time VARCHAR(40) COLLATE utf8mb4_bin,
                target_ip VARCHAR(80), rcode VARCHAR(20), query_type VARCHAR(20),
                authority_record TEXT, add_msg TEXT, dns_ip VARCHAR(80),
                `partition` INT, `offset` BIGINT,
                KEY po (`partition`, `offset`),
                KEY k (client_ip, time)
            ) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
        ))
        .await
        .expect("create table");
    }

    /// Creates `table` in the test database with the README's seed DDL translated for
    /// MariaDB as a new user would: `time DATETIME`, VARCHAR for the rest, the server's
    /// default utf8mb4 collation, and the Doris DUPLICATE KEY's columns as an index. The
    /// default shape of the key_columns tests' table (issue 34): a typed, collated key,
    /// not TEXT. Rows are written with [`Db::insert_seed_line`] ([`TableShape::Seed`]).
    pub async fn create_seed_ddl_table(&self, table: &str) {
        let mut c = self.pool.get_conn().await.expect("conn");
        c.query_drop(format!(
            "CREATE TABLE `{table}` (
                client_ip VARCHAR(64), domain VARCHAR(512), time DATETIME, target_ip VARCHAR(64),
                rcode VARCHAR(16), query_type VARCHAR(16), authority_record VARCHAR(512),
                add_msg VARCHAR(512), dns_ip VARCHAR(64),
                KEY k (client_ip, domain, time)
            ) DEFAULT CHARSET = utf8mb4"
        ))
        .await
        .expect("create seed ddl table");
    }

    /// Creates `table` with the README's seed DDL as [`Db::create_seed_ddl_table`] does, but
    /// with `PRIMARY KEY (client_ip, domain, time)`: the table keeps one row per key (issue
    /// 34 item 1). Rows are written with [`Db::upsert_seed_line`] ([`TableShape::SeedUpsert`]).
    pub async fn create_upsert_table(&self, table: &str) {
        let mut c = self.pool.get_conn().await.expect("conn");
        c.query_drop(format!(
            "CREATE TABLE `{table}` (
                client_ip VARCHAR(64), domain VARCHAR(512), time DATETIME, target_ip VARCHAR(64),
                rcode VARCHAR(16), query_type VARCHAR(16), authority_record VARCHAR(512),
                add_msg VARCHAR(512), dns_ip VARCHAR(64),
                PRIMARY KEY (client_ip, domain, time)
            ) DEFAULT CHARSET = utf8mb4"
        ))
        .await
        .expect("create upsert table");
    }

    /// Creates database `dbname` holding the seed's table (Doris DDL translated for MariaDB,
    /// `time` a DATETIME as in Doris) under its documented name [`SEED_TABLE`]; returns the
    /// database's URL.
    pub async fn create_seed_table(&self, dbname: &str) -> String {
        let mut c = self.pool.get_conn().await.expect("conn");
        c.query_drop(format!("CREATE DATABASE `{dbname}`"))
            .await
            .expect("create db");
        c.query_drop(format!(
            "CREATE TABLE `{dbname}`.{SEED_TABLE} (
                client_ip VARCHAR(64) COLLATE utf8mb4_bin, domain VARCHAR(512) COLLATE utf8mb4_bin,
                time DATETIME, target_ip VARCHAR(64), rcode VARCHAR(16), query_type VARCHAR(16),
                authority_record VARCHAR(512), add_msg VARCHAR(512), dns_ip VARCHAR(64)
            ) DEFAULT CHARSET = utf8mb4"
        ))
        .await
        .expect("create seed table");
        let base = mysql_url();
        format!("{}/{dbname}", base.rsplit_once('/').expect("db in url").0)
    }

    /// Inserts one record's row with a prepared statement (binary protocol): independent of
    /// the auditor's own literal escaping, so an escaping bug cannot cancel itself out.
    pub async fn insert_line(&self, table: &str, line: &[u8], partition: i32, offset: i64) {
        let text = String::from_utf8_lossy(line).to_string();
        let mut f: Vec<String> = text.split('|').map(str::to_string).collect();
        f.resize(9, String::new());
        let mut c = self.pool.get_conn().await.expect("mysql conn");
        c.exec_drop(
            format!(
                "INSERT INTO `{table}` ({}, `partition`, `offset`) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                SEED_FIELDS.join(", ")
            ),
            (
                &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], partition, offset,
            ),
        )
        .await
        .expect("insert");
    }

    /// Inserts one record's row into a [`TableShape::Seed`] table: the 9 fields only, no
    /// Kafka coordinates (prepared statement, like [`Db::insert_line`]).
    pub async fn insert_seed_line(&self, table: &str, line: &[u8]) {
        let line = String::from_utf8_lossy(line).to_string();
        let f: Vec<&str> = line.split('|').collect();
        let mut c = self.pool.get_conn().await.expect("conn");
        c.exec_drop(
            format!("INSERT INTO `{table}` VALUES (?,?,?,?,?,?,?,?,?)"),
            (f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]),
        )
        .await
        .expect("insert");
    }

    /// Writes one record's row into a [`TableShape::SeedUpsert`] table as an upserting
    /// pipeline does: a row with the same key is replaced, never added to.
    pub async fn upsert_seed_line(&self, table: &str, line: &[u8]) {
        let line = String::from_utf8_lossy(line).to_string();
        let f: Vec<&str> = line.split('|').collect();
        let mut c = self.pool.get_conn().await.expect("conn");
        let updates: Vec<String> = SEED_FIELDS
            .iter()
            .map(|c| format!("{c} = VALUES({c})"))
            .collect();
        c.exec_drop(
            format!(
                "INSERT INTO `{table}` VALUES (?,?,?,?,?,?,?,?,?) ON DUPLICATE KEY UPDATE {}",
                updates.join(", ")
            ),
            (f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]),
        )
        .await
        .expect("upsert");
    }

    pub async fn count(&self, table: &str) -> i64 {
        let mut c = self.pool.get_conn().await.expect("mysql conn");
        c.query_first::<i64, _>(format!("SELECT COUNT(*) FROM `{table}`"))
            .await
            .expect("count")
            .unwrap_or(0)
    }
}
