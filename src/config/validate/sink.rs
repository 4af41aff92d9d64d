//! Validation of `[audits.sink]`: url and kind agree, table or index, credentials, TLS; what
//! it proves is returned as the audit's [`SinkSpec`].

use super::super::spec::{
    EsAuthSpec, EsSinkSpec, SecretSource, SinkColumns, SinkSpec, SqlKind, SqlSinkSpec, SqlTls,
    StreamLoadSpec,
};
use super::super::{ConfigError, SinkConfig, SinkKind, SinkTls, err};
use super::{check_identifier, one_source};

/// mysql_async's own TLS url parameters: TLS is configured with `sink.tls` instead, so one
/// setting decides.
const URL_TLS_PARAMS: &[&str] = &[
    "require_ssl",
    "verify_ca",
    "verify_identity",
    "built_in_roots",
];

impl SinkConfig {
    /// `tls`, `ca_file` and the client identity of a doris/mysql sink agree.
    fn validate_sql_tls(&self, p: &str, url: &url::Url) -> Result<(), ConfigError> {
        if let Some((name, _)) = url
            .query_pairs()
            .find(|(name, _)| URL_TLS_PARAMS.contains(&name.as_ref()))
        {
            return err(
                format!("{p}.url"),
                format!("TLS is set with {p}.tls, not the url parameter `{name}`"),
            );
        }
        let mode = self.tls_mode();
        if self.ca_file.is_some() {
            match mode {
                SinkTls::Disabled => {
                    return err(
                        format!("{p}.ca_file"),
                        format!(
                            "is set but {p}.tls is \"disabled\": set tls = \"verify_ca\" or \
                             \"verify_identity\", or remove ca_file"
                        ),
                    );
                }
                SinkTls::Required => {
                    return err(
                        format!("{p}.ca_file"),
                        format!(
                            "is set but {p}.tls = \"required\" does not verify the server: \
                             use \"verify_ca\" or \"verify_identity\""
                        ),
                    );
                }
                SinkTls::VerifyCa | SinkTls::VerifyIdentity => {}
            }
        }
        if self.client_identity_file.is_some() && mode == SinkTls::Disabled {
            return err(
                format!("{p}.client_identity_file"),
                format!("needs {p}.tls other than \"disabled\""),
            );
        }
        if self.client_identity_password.is_some() && self.client_identity_file.is_none() {
            return err(
                format!("{p}.client_identity_password"),
                "is set without client_identity_file",
            );
        }
        Ok(())
    }

    /// Checks the section (keys named under `p`) and returns its typed spec, with the
    /// columns the audit's matching queries.
    pub(super) fn validate(&self, p: &str, columns: SinkColumns) -> Result<SinkSpec, ConfigError> {
        let url_path = format!("{p}.url");
        let url = match self.url.parse() {
            Ok(url) => url,
            Err(e) => return err(url_path, format!("not a valid URL ({e})")),
        };
        let scheme = url.scheme().to_ascii_lowercase();
        let expected: &[&str] = if self.kind.is_sql() {
            &["mysql"]
        } else {
            &["http", "https"]
        };
        if !matches!(scheme.as_str(), "mysql" | "http" | "https") {
            return err(
                url_path,
                format!("scheme must be mysql, http or https (got `{scheme}`)"),
            );
        }
        if !expected.contains(&scheme.as_str()) {
            return err(
                url_path,
                format!(
                    "scheme must be mysql, http or https, matching sink.kind: kind {} needs {}, \
                     got {scheme}",
                    self.kind,
                    if self.kind.is_sql() {
                        "mysql://"
                    } else {
                        "http:// or https://"
                    }
                ),
            );
        }
        if url.host_str().is_none_or(str::is_empty) {
            return err(url_path, "has no host");
        }
        let url_user = self.url.username();
        if let (Some(user), Some(from_url)) = (&self.username, &url_user)
            && user != from_url
        {
            return err(
                format!("{p}.username"),
                "differs from the user name in the url; set it in one place",
            );
        }
        one_source(p, "password", &self.password, &self.password_file)?;
        if url.password().is_some() && (self.password.is_some() || self.password_file.is_some()) {
            let key = if self.password.is_some() {
                "password"
            } else {
                "password_file"
            };
            return err(
                format!("{p}.{key}"),
                "the url already carries a password; set it in one place",
            );
        }
        one_source(p, "api_key", &self.api_key, &self.api_key_file)?;
        let has_api_key = self.api_key.is_some() || self.api_key_file.is_some();
        if self.query_timeout.is_zero() {
            return err(format!("{p}.query_timeout"), "must be > 0");
        }
        if self.kind.is_sql() {
            self.validate_sql(p, &url, has_api_key, columns)
                .map(|sql| SinkSpec::Sql(Box::new(sql)))
        } else {
            self.validate_es(p, url_user, has_api_key, columns)
                .map(|es| SinkSpec::Elasticsearch(Box::new(es)))
        }
    }

    /// The doris/mysql rules of [`Self::validate`], after those every kind shares.
    fn validate_sql(
        &self,
        p: &str,
        url: &url::Url,
        has_api_key: bool,
        columns: SinkColumns,
    ) -> Result<SqlSinkSpec, ConfigError> {
        if self.index.is_some() {
            return err(
                format!("{p}.index"),
                format!("applies to elasticsearch; kind {} uses `table`", self.kind),
            );
        }
        if has_api_key {
            return err(
                format!("{p}.api_key"),
                format!("applies to elasticsearch only, not kind {}", self.kind),
            );
        }
        let table_path = format!("{p}.table");
        let Some(table) = &self.table else {
            return err(table_path, format!("is required for kind {}", self.kind));
        };
        let parts: Vec<&str> = table.split('.').collect();
        if parts.len() > 2 {
            return err(table_path, "must be `table` or `database.table`");
        }
        for part in &parts {
            check_identifier(&table_path, part)?;
        }
        let database_in_url = url.path().trim_matches('/');
        let (database, bare_table) = match parts[..] {
            [database, table] => (database, table),
            _ if database_in_url.is_empty() => {
                return err(
                    table_path,
                    format!(
                        "`{table}` names no database: put it in the url \
                         (mysql://host:9030/database) or write database.table"
                    ),
                );
            }
            _ => (database_in_url, table.as_str()),
        };
        self.validate_sql_tls(p, url)?;
        let password = SecretSource::of(p, "password", &self.password, &self.password_file);
        let mut stream_load = None;
        if let Some(stream_load_url) = &self.stream_load_url {
            let sp = format!("{p}.stream_load_url");
            if self.kind != SinkKind::Doris {
                return err(sp, "applies to kind doris only");
            }
            match url::Url::parse(stream_load_url) {
                Err(e) => return err(sp, format!("not a valid URL ({e})")),
                Ok(u) if !matches!(u.scheme(), "http" | "https") => {
                    return err(sp, "scheme must be http or https");
                }
                Ok(u) if !u.username().is_empty() || u.password().is_some() => {
                    return err(
                        sp,
                        "must not carry credentials; set sink.username / sink.password",
                    );
                }
                Ok(_) => {}
            }
            stream_load = Some(StreamLoadSpec {
                url: stream_load_url.clone(),
                database: database.to_owned(),
                table: bare_table.to_owned(),
                username: self.effective_username().unwrap_or_default(),
                password: password
                    .clone()
                    .or_else(|| self.url.password().map(SecretSource::Value)),
            });
        }
        Ok(SqlSinkSpec {
            kind: if self.kind == SinkKind::Doris {
                SqlKind::Doris
            } else {
                SqlKind::Mysql
            },
            url: self.url.clone(),
            username: self.username.clone(),
            password,
            table: table.clone(),
            database: database.to_owned(),
            tls: SqlTls {
                mode: self.tls_mode(),
                ca_file: self.ca_file.clone(),
                client_identity_file: self.client_identity_file.clone(),
                client_identity_password: self.client_identity_password.clone(),
            },
            stream_load,
            query_timeout: self.query_timeout,
            columns,
        })
    }

    /// The elasticsearch rules of [`Self::validate`], after those every kind shares.
    fn validate_es(
        &self,
        p: &str,
        url_user: Option<String>,
        has_api_key: bool,
        columns: SinkColumns,
    ) -> Result<EsSinkSpec, ConfigError> {
        if self.table.is_some() {
            return err(
                format!("{p}.table"),
                "applies to doris/mysql; kind elasticsearch uses `index`",
            );
        }
        for (key, set) in [
            ("tls", self.tls.is_some()),
            ("client_identity_file", self.client_identity_file.is_some()),
            (
                "client_identity_password",
                self.client_identity_password.is_some(),
            ),
        ] {
            if set {
                return err(
                    format!("{p}.{key}"),
                    "applies to doris/mysql; elasticsearch uses TLS when its url is https \
                     (verified against ca_file or the system roots)",
                );
            }
        }
        if self.stream_load_url.is_some() {
            return err(format!("{p}.stream_load_url"), "applies to kind doris only");
        }
        let index_path = format!("{p}.index");
        let Some(index) = &self.index else {
            return err(index_path, "is required for kind elasticsearch");
        };
        if index.chars().any(|c| {
            c.is_whitespace()
                || c.is_control()
                || c.is_ascii_uppercase()
                || matches!(c, '\\' | '/' | '"' | '<' | '>' | '|' | '#' | '?')
        }) || index.starts_with(['-', '_', '+'])
        {
            return err(
                index_path,
                format!("`{}` is not a valid index name", index.escape_default()),
            );
        }
        let has_basic = self.username.is_some()
            || url_user.is_some()
            || self.password.is_some()
            || self.password_file.is_some();
        if has_api_key && has_basic {
            return err(
                format!("{p}.api_key"),
                "use either api_key or username/password, not both",
            );
        }
        // Basic auth needs both halves; a lone password would silently be dropped.
        let username = self.username.clone().or(url_user);
        let password = SecretSource::of(p, "password", &self.password, &self.password_file)
            .or_else(|| self.url.password().map(SecretSource::Value));
        let api_key = SecretSource::of(p, "api_key", &self.api_key, &self.api_key_file);
        let auth = match (api_key, username, password) {
            (Some(key), _, _) => EsAuthSpec::ApiKey(key),
            (None, Some(username), password) => EsAuthSpec::Basic { username, password },
            (None, None, Some(_)) => {
                let (key, message) = if self.password.is_some() {
                    ("password", "needs a username (sink.username)")
                } else if self.password_file.is_some() {
                    ("password_file", "needs a username (sink.username)")
                } else {
                    // `https://:secret@host`: the url's own password, without a user.
                    (
                        "url",
                        "carries a password but no user name: a password needs a username \
                         (sink.username, or user:password@ in the url)",
                    )
                };
                return err(format!("{p}.{key}"), message);
            }
            (None, None, None) => EsAuthSpec::None,
        };
        Ok(EsSinkSpec {
            url: self.url.without_credentials(),
            auth,
            index: index.clone(),
            ca_file: self.ca_file.clone(),
            query_timeout: self.query_timeout,
            columns,
        })
    }
}
