//! What the end-to-end sections (`keys_e2e`, `offsets_e2e`) share, so both measure the same
//! way: a fresh topic of `n` seed-shaped records, a fresh table holding a row for each, the
//! bare consumer's baseline on the topic, then the daemon until the section's sampler is
//! done; the topic and the table are dropped after, whatever came of it.

use crate::daemon::{self, Daemon};
use crate::tail::{create_topic, produce};
use crate::util::unique;
use anyhow::{Context, Result};
use mysql_async::prelude::Queryable;
use std::path::Path;
use std::time::Duration;

/// One section's table and daemon.
pub struct Setup<'a> {
    /// Names the section in progress lines, and its topic and table.
    pub name: &'a str,
    /// Record `i`'s payload (the topic's records; [`crate::util::dns_line`] by default).
    pub line: fn(usize) -> String,
    /// The `CREATE TABLE` statement of a table of this name.
    pub create: fn(&str) -> String,
    /// The `INSERT … SELECT` of the rows of records `from..=to` into the table
    /// ([`daemon::load_table`]).
    pub fill: fn(&str, u64, u64) -> String,
    /// The index added once the rows are in.
    pub index: &'a str,
    /// The daemon's `match` section.
    pub matching: &'a str,
    /// kcat, for a second same-run baseline beside the bare consumer (`None`: none taken).
    pub kcat: Option<&'a crate::tail::Kcat>,
}

/// What a run measured: the sampler's figures and the bare consumer's baseline.
pub struct Run<T> {
    pub sampled: T,
    /// Records per second.
    pub bare_rate: f64,
    pub bare_cpu: Duration,
    /// kcat's median pass: records per second and CPU µs per record (when the setup
    /// named kcat).
    pub kcat: Option<(f64, f64)>,
}

/// Runs `setup` on `n` records: `sample` watches the daemon until it is done (its log is
/// copied to `GAP_AUDITOR_BENCH_KEEP_LOG` when set).
pub async fn run<T>(
    bin: &Path,
    (brokers, mysql): (&str, &str),
    n: u64,
    setup: &Setup<'_>,
    sample: impl AsyncFnOnce(&Daemon) -> Result<T>,
) -> Result<Run<T>> {
    let base = format!("bench_{}", setup.name.replace(' ', "_"));
    let topic = unique(&base);
    create_topic(brokers, &topic).await?;
    let (b, t) = (brokers.to_string(), topic.clone());
    let line = setup.line;
    tokio::task::spawn_blocking(move || produce(&b, &t, n as usize, line)).await??;
    let pool = mysql_async::Pool::new(mysql);
    let mut conn = pool.get_conn().await.context("MariaDB connection")?;
    let table = unique(&base);
    let result = async {
        conn.query_drop((setup.create)(&table))
            .await
            .with_context(|| format!("creating {table}"))?;
        let took = daemon::load_table(
            &mut conn,
            &table,
            n,
            |from, to| (setup.fill)(&table, from, to),
            setup.index,
        )
        .await?;
        eprintln!(
            "{}: loaded {n} rows in {:.1}s",
            setup.name,
            took.as_secs_f64()
        );
        // Before the daemon starts, so that nothing else reads the topic meanwhile.
        let kcat = match setup.kcat {
            Some(k) => {
                let (k, b, t) = (k.clone(), brokers.to_string(), topic.clone());
                Some(
                    tokio::task::spawn_blocking(move || daemon::kcat_baseline(&k, &b, &t, n))
                        .await??,
                )
            }
            None => None,
        };
        // The pipeline has written everything and committed past it; baseline, same topic.
        let (d, bare_rate, bare_cpu) =
            daemon::start_after_baseline(bin, brokers, mysql, &topic, &table, n, setup.matching)
                .await?;
        let sampled = sample(&d).await;
        if let Ok(keep) = std::env::var("GAP_AUDITOR_BENCH_KEEP_LOG") {
            let _ = std::fs::copy(&d.log, keep);
        }
        d.stop().await;
        Ok(Run {
            sampled: sampled?,
            bare_rate,
            bare_cpu,
            kcat,
        })
    }
    .await;
    let _ = conn
        .query_drop(format!("DROP TABLE IF EXISTS {table}"))
        .await;
    drop(conn);
    let _ = pool.disconnect().await;
    daemon::delete_topics(brokers, std::slice::from_ref(&topic)).await;
    result
}
