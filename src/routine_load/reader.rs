//! Reads one Routine Load job from the Doris FE over the MySQL protocol (text protocol
//! only: the FE's prepared statements differ across versions and one statement needs none).

use super::job::{Columns, JobError, JobRow, pick, show_statement};
use crate::config::SecretUrl;
use crate::doris_fe::{self, columns};
use mysql_async::Pool;
use mysql_async::prelude::Queryable;
use std::time::Duration;

/// Why the job could not be read this time (the audit keeps its last positions and holds
/// verdicts, as for an unreadable pipeline group). Never echoes the FE's URL.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// `pipeline.url` is not a MySQL URL.
    #[error("audits.pipeline.url is not a valid mysql:// URL")]
    Url,
    /// The FE did not answer in time.
    #[error("the Doris FE did not answer SHOW ROUTINE LOAD within {0:?}")]
    Timeout(Duration),
    /// Connecting or the statement failed (the driver's words, which hold no password).
    #[error("SHOW ROUTINE LOAD failed: {0}")]
    Query(String),
    /// The answer is not what Doris documents.
    #[error(transparent)]
    Job(#[from] JobError),
}

/// The job's reader: one pooled connection to the FE.
pub struct JobReader {
    pool: Pool,
    job: String,
    statement: String,
    timeout: Duration,
}

impl JobReader {
    /// A reader of `job` (`name` or `db.name`) on the FE at `url` (connects lazily).
    pub fn new(url: &SecretUrl, job: &str, timeout: Duration) -> Result<Self, ReadError> {
        let pool = doris_fe::pool(url.expose()).ok_or(ReadError::Url)?;
        Ok(Self {
            pool,
            job: job.to_owned(),
            statement: show_statement(job),
            timeout,
        })
    }

    /// The job's name as configured.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Reads the job once: the live job of that name, else the one that ended last
    /// ([`super::job::pick`]).
    pub async fn read(&self) -> Result<JobRow, ReadError> {
        let rows = tokio::time::timeout(self.timeout, self.query())
            .await
            .map_err(|_| ReadError::Timeout(self.timeout))??;
        let mut first_error = None;
        let mut jobs = Vec::new();
        for cols in &rows {
            match JobRow::from_columns(cols) {
                Ok(j) => jobs.push(j),
                // An ended job's odd answer must not hide the live one's.
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match (pick(jobs), first_error) {
            (Some(job), _) => Ok(job),
            (None, Some(e)) => Err(e.into()),
            (None, None) => Err(JobError::NotFound(self.job.clone()).into()),
        }
    }

    async fn query(&self) -> Result<Vec<Columns>, ReadError> {
        let mut conn = self
            .pool
            .get_conn()
            .await
            .map_err(|e| ReadError::Query(e.to_string()))?;
        let rows: Vec<mysql_async::Row> = conn
            .query(&self.statement)
            .await
            .map_err(|e| ReadError::Query(e.to_string()))?;
        Ok(rows.into_iter().map(columns).collect())
    }

    /// Closes the pool.
    pub async fn close(self) {
        let _ = self.pool.disconnect().await;
    }
}
