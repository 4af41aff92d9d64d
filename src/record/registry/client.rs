//! The typed client of the two documented registry calls (`GET /schemas/ids/{id}`, `GET
//! /subjects/{subject}/versions/{version}`), with basic auth and TLS like the sinks.

use super::{RawSchema, RegistryError, SchemaType};
use crate::config::{SchemaRegistryConfig, Secret};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

#[derive(Deserialize)]
struct SchemaResponse {
    schema: String,
    #[serde(rename = "schemaType", default)]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<Reference>,
}

#[derive(Deserialize)]
struct Reference {
    name: String,
    subject: String,
    version: i64,
}

/// Most references followed for one schema (a cycle or a hostile registry cannot loop).
const MAX_REFERENCES: usize = 64;

/// A typed client of the two registry calls, with basic auth and TLS like the sinks.
#[derive(Clone)]
pub struct RegistryClient {
    http: reqwest::Client,
    base: url::Url,
    auth: Option<(String, Secret)>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("base", &self.base.as_str())
            .field("auth", &self.auth.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl RegistryClient {
    /// A client for `cfg` (validated by the config layer: the URL parses, the CA file was
    /// readable, the password was read from its file). Errors name the config key.
    pub fn new(cfg: &SchemaRegistryConfig) -> Result<Self, String> {
        let mut base: url::Url = cfg
            .url
            .parse()
            .map_err(|e| format!("schema_registry.url: {e}"))?;
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let mut b = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = &cfg.ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                format!(
                    "schema_registry.ca_file: cannot read {}: {e}",
                    path.display()
                )
            })?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| format!("schema_registry.ca_file: {e}"))?;
            b = b.add_root_certificate(cert);
        }
        let http = b
            .build()
            .map_err(|e| format!("schema registry client: {e}"))?;
        let auth = cfg
            .username
            .clone()
            .map(|u| (u, cfg.password.clone().unwrap_or_else(|| Secret::from(""))));
        Ok(Self { http, base, auth })
    }

    async fn get(&self, path: &str, id: u32) -> Result<SchemaResponse, RegistryError> {
        let url = self
            .base
            .join(path)
            .map_err(|e| RegistryError::Unavailable(format!("bad path {path}: {e}")))?;
        let mut req = self.http.get(url).header(
            reqwest::header::ACCEPT,
            "application/vnd.schemaregistry.v1+json, application/json",
        );
        if let Some((user, password)) = &self.auth {
            req = req.basic_auth(user, Some(password.expose()));
        }
        // Credentials go in a header, never in the URL the error could print.
        let resp = req
            .send()
            .await
            .map_err(|e| RegistryError::Unavailable(chain(&e)))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| RegistryError::Unavailable(chain(&e)))?;
        if status.is_success() {
            return serde_json::from_slice(&body).map_err(|e| RegistryError::Refused {
                id,
                status: status.as_u16(),
                message: format!("not a schema response: {e}"),
            });
        }
        let json = serde_json::from_slice::<serde_json::Value>(&body).ok();
        if status == reqwest::StatusCode::NOT_FOUND {
            // Only the registry's own "not found" (40401 subject, 40402 version, 40403
            // schema: Confluent, Karapace, Redpanda, Apicurio's ccompat API) is about the id.
            // Another 404 (a wrong path prefix in schema_registry.url, a proxy with no route,
            // Confluent's `{"error_code":404}` for an unknown path) says nothing about it and
            // must never make it final.
            let code = json
                .as_ref()
                .and_then(|v| v.get("error_code"))
                .and_then(serde_json::Value::as_i64);
            if code.is_some_and(|c| (40401..=40499).contains(&c)) {
                return Err(RegistryError::NotFound(id));
            }
        }
        let message = json
            .as_ref()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(RegistryError::Refused {
                id,
                status: status.as_u16(),
                message: format!(
                    "not the schema registry's \"not found\" (check schema_registry.url): {message}"
                ),
            });
        }
        if status.is_server_error() {
            return Err(RegistryError::Unavailable(format!(
                "HTTP {status}: {message}"
            )));
        }
        Err(RegistryError::Refused {
            id,
            status: status.as_u16(),
            message,
        })
    }

    /// `GET /schemas/ids/{id}`, then every reference, depth first (dependencies first).
    pub async fn fetch(&self, id: u32) -> Result<RawSchema, RegistryError> {
        let top = self.get(&format!("schemas/ids/{id}"), id).await?;
        let schema_type = match top.schema_type.as_deref() {
            None | Some("AVRO") => SchemaType::Avro,
            Some("PROTOBUF") => SchemaType::Protobuf,
            Some("JSON") => SchemaType::Json,
            Some(other) => {
                return Err(RegistryError::Refused {
                    id,
                    status: 200,
                    message: format!("unknown schemaType {other:?}"),
                });
            }
        };
        let mut references = Vec::new();
        let mut seen = HashSet::new();
        let mut stack: Vec<(Reference, bool)> = top
            .references
            .into_iter()
            .rev()
            .map(|r| (r, false))
            .collect();
        // Post-order walk: a reference is emitted after its own references.
        let mut texts: HashMap<String, String> = HashMap::new();
        while let Some((r, expanded)) = stack.pop() {
            if expanded {
                if let Some(t) = texts.remove(&r.name) {
                    references.push((r.name, t));
                }
                continue;
            }
            if !seen.insert(r.name.clone()) {
                continue;
            }
            if seen.len() > MAX_REFERENCES {
                return Err(RegistryError::Refused {
                    id,
                    status: 200,
                    message: format!("more than {MAX_REFERENCES} schema references"),
                });
            }
            // `deleted=true`: a referenced version soft-deleted since still defines the
            // schema that references it (Confluent refuses such deletes; other registries
            // may not), and a 404 for it would count towards giving the id up.
            let path = format!(
                "subjects/{}/versions/{}?deleted=true",
                utf8_percent_encode(&r.subject),
                r.version
            );
            let resp = self.get(&path, id).await?;
            texts.insert(r.name.clone(), resp.schema);
            let children: Vec<Reference> = resp.references;
            stack.push((r, true));
            stack.extend(children.into_iter().rev().map(|c| (c, false)));
        }
        Ok(RawSchema {
            schema_type,
            text: top.schema,
            references,
        })
    }
}

/// An error with its causes ("error sending request: ... Connection refused"): reqwest's
/// own text names only the outermost.
fn chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// A path segment with everything but unreserved characters percent-encoded (subjects may
/// hold `/`, `:` and spaces).
pub(super) fn utf8_percent_encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}
