//! Secret values: [`Secret`] and [`SecretUrl`] print `[redacted]`, and the `*_file` keys
//! that read them from files at load time.

use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::validate::check_api_token;
use super::{Config, ConfigError, err};

/// A secret string (password, API key, SASL credential). `Debug` and `Display` print
/// `[redacted]`; use [`Secret::expose`] exactly where the value is handed to a client.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value itself. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SecretVisitor;
        impl Visitor<'_> for SecretVisitor {
            type Value = Secret;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
                Ok(Secret(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Secret, E> {
                Ok(Secret(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Secret, E> {
                Ok(Secret(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Secret, E> {
                Ok(Secret(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Secret, E> {
                Ok(Secret(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Secret, E> {
                Ok(Secret(v.to_string()))
            }
        }
        d.deserialize_string(SecretVisitor)
    }
}

/// A URL that may embed `user:password@`. [`SecretUrl::expose`] gives the full URL for the
/// client; `Debug` and `Display` print it with the password replaced by `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps a URL (surrounding whitespace is trimmed).
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into().trim().to_owned())
    }

    /// The full URL, password included. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Parses the URL.
    pub fn parse(&self) -> Result<url::Url, url::ParseError> {
        url::Url::parse(&self.0)
    }

    /// Lower-cased scheme (`mysql`, `http`, `https`), if the URL parses.
    pub fn scheme(&self) -> Option<String> {
        self.parse().ok().map(|u| u.scheme().to_ascii_lowercase())
    }

    /// User name embedded in the URL, percent-decoded; `None` when absent.
    pub fn username(&self) -> Option<String> {
        let url = self.parse().ok()?;
        let user = url.username();
        if user.is_empty() {
            None
        } else {
            Some(percent_decode(user))
        }
    }

    /// Password embedded in the URL, percent-decoded; `None` when absent.
    pub fn password(&self) -> Option<Secret> {
        let url = self.parse().ok()?;
        url.password().map(|p| Secret(percent_decode(p)))
    }

    /// The URL with user name and password removed (safe to log, usable as a base URL
    /// when credentials are sent separately). Falls back to [`SecretUrl::redacted`] if the
    /// URL does not parse.
    pub fn without_credentials(&self) -> String {
        match self.parse() {
            Ok(mut url) => {
                // Both only fail for URLs that cannot carry credentials at all.
                let _ = url.set_password(None);
                let _ = url.set_username("");
                url.to_string()
            }
            Err(_) => self.redacted(),
        }
    }

    /// The URL with the password (if any) replaced by `[redacted]`.
    ///
    /// Works on the raw text and errs on the side of redacting too much: everything
    /// between the first `:` after `scheme://` and the last `@` is hidden.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

fn redact_url(raw: &str) -> String {
    let Some(scheme_end) = raw.find("://") else {
        // Not an URL we understand: hide it entirely if it could carry credentials.
        return if raw.contains('@') {
            "[redacted]".to_owned()
        } else {
            raw.to_owned()
        };
    };
    let auth_start = scheme_end + 3;
    let rest = &raw[auth_start..];
    let Some(at) = rest.rfind('@') else {
        return raw.to_owned();
    };
    let userinfo = &rest[..at];
    match userinfo.find(':') {
        None => raw.to_owned(),
        Some(colon) => format!(
            "{}{}:[redacted]{}",
            &raw[..auth_start],
            &userinfo[..colon],
            &rest[at..]
        ),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Secret::deserialize(d).map(|s| SecretUrl::new(s.0))
    }
}

impl Config {
    /// Reads `*_file` secrets into their value keys and checks `ca_file` and
    /// `client_identity_file` are readable.
    pub(super) fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = self.server.api_token_file.take() {
            let token = read_secret_file("server.api_token_file", &path)?;
            check_api_token("server.api_token_file", &token)?;
            self.server.api_token = Some(token);
        }
        let files = std::mem::take(&mut self.kafka.property_files);
        for (key, path) in files {
            let value = read_secret_file(&format!("kafka.property_files[\"{key}\"]"), &path)?;
            self.kafka.properties.insert(key, value);
        }
        for (i, audit) in self.audits.iter_mut().enumerate() {
            let sink = &mut audit.sink;
            if let Some(path) = sink.password_file.take() {
                sink.password = Some(read_secret_file(
                    &format!("audits[{i}].sink.password_file"),
                    &path,
                )?);
            }
            if let Some(path) = sink.api_key_file.take() {
                sink.api_key = Some(read_secret_file(
                    &format!("audits[{i}].sink.api_key_file"),
                    &path,
                )?);
            }
            for (key, file) in [
                ("ca_file", &sink.ca_file),
                ("client_identity_file", &sink.client_identity_file),
            ] {
                check_readable(&format!("audits[{i}].sink.{key}"), file.as_deref())?;
            }
            if let Some(reg) = &mut audit.record.schema_registry {
                let p = format!("audits[{i}].record.schema_registry");
                if let Some(path) = reg.password_file.take() {
                    reg.password = Some(read_secret_file(&format!("{p}.password_file"), &path)?);
                }
                check_readable(&format!("{p}.ca_file"), reg.ca_file.as_deref())?;
            }
        }
        Ok(())
    }
}

/// A file the clients open later (CA bundle, client identity): refused at load when it
/// cannot be opened, so the daemon fails at start, not at its first query.
fn check_readable(key: &str, file: Option<&Path>) -> Result<(), ConfigError> {
    let Some(path) = file else { return Ok(()) };
    match std::fs::File::open(path) {
        Ok(_) => Ok(()),
        Err(e) => err(key, format!("cannot read {}: {e}", path.display())),
    }
}

/// Reads a secret file. Errors name the key and the file, never the content.
pub(super) fn read_secret_file(key: &str, path: &Path) -> Result<Secret, ConfigError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ConfigError::new(key, format!("cannot read {}: {e}", path.display())))?;
    let mut text = String::from_utf8(bytes)
        .map_err(|_| ConfigError::new(key, format!("{} is not valid UTF-8", path.display())))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(Secret(text))
}
